package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/ir"
)

// bf16Level is the x86-64 level with AVX512-BF16.
const bf16Level = "x86-64-v4-bf16"

// bf16TileText is tileKernelText's Q·Kᵀ with bf16 Q and K staged into f32
// arrays as prefill stages them (f32 conversions and zero padding): ROWS
// rows of head dim 32 against 48 positions, every extent but K's dynamic.
const bf16TileText = `module t prefix t

kernel t_k_%s role prefill level "%s" (q: bf16* [Q], k: bf16* [1536], s: f32* [S] out, m: i32, n: i32) {
  for item in 0 .. 1 parallel @work {
    alloc qs: f32[Q]
    alloc kb: f32[1536]
    alloc sc: f32[S]
    for i in 0 .. Q spread {
      if (i < (m * 32)) {
        store qs[i] = f32(q[i])
      } else {
        store qs[i] = 0.0:f32
      }
    }
    for kt in 0 .. 1 serial @kv_tile {
      for i in 0 .. 1536 spread {
        store kb[i] = f32(k[i])
      }
      matmul sc[ROWS, 48] = qs[ROWS, 32] * kb^T[48, 32] extent(m, n, 32)
      for r in 0 .. ROWS spread {
        if (r < m) {
          for j in 0 .. 48 spread {
            if (j < n) {
              store s[((r * 48) + j)] = sc[((r * 48) + j)]
            }
          }
        }
      }
    }
  }
  return 0
}
`

func parseBF16Tile(t *testing.T, level string, rows int) *ir.Module {
	t.Helper()
	text := strings.NewReplacer("ROWS", fmt.Sprint(rows), "Q]", fmt.Sprint(rows*32, "]"), "Q spread", fmt.Sprint(rows*32, " spread"),
		"S]", fmt.Sprint(rows*48, "]")).Replace(bf16TileText)
	m, err := ir.Parse(fmt.Sprintf(text, strings.ReplaceAll(level, "-", "_"), level))
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("parse", m)
	return m
}

// scheduleBF16Tile runs block-matmul, lower-tiles and vectorize on the
// tile at level.
func scheduleBF16Tile(t *testing.T, level string, rows int) (before, after *ir.Module) {
	t.Helper()
	mc, err := NewMachine("")
	if err != nil {
		t.Fatal(err)
	}
	before = parseBF16Tile(t, level, rows)
	return before, scheduleTile(t, mc, before, level)
}

// scheduleText parses module text, verifies it and schedules it
// (scheduleTile) at level.
func scheduleText(t *testing.T, text, level string) *ir.Module {
	t.Helper()
	m, err := ir.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	ir.MustVerify("parse", m)
	mc, err := NewMachine("")
	if err != nil {
		t.Fatal(err)
	}
	return scheduleTile(t, mc, m, level)
}

// scheduleTile runs block-matmul, lower-tiles and vectorize on m, a tile
// at level, verifying after each.
func scheduleTile(t *testing.T, mc *Machine, m *ir.Module, level string) *ir.Module {
	t.Helper()
	for _, p := range []func(*ir.Module) (*ir.Module, error){mc.BlockMatMul, LowerTiles, Vectorize} {
		var err error
		if m, err = p(m); err != nil {
			t.Fatal(err)
		}
		ir.MustVerify(level, m)
	}
	return m
}

func bf16Bits(x float32) uint16 { return uint16(math.Float32bits(x) >> 16) }

func bf16Value(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// TestDotBF16Shape: at x86-64-v4-bf16, prefill's Q·Kᵀ on bf16-exact arrays
// packs Q into pairs once, before the KV tile loop, packs K's pairs
// transposed in the loop, and runs micro-kernels of dotbf16 (up to 8×3 of them
// per step on 3 vector loads of K's pairs), keeping the f32 micro-kernels
// for an operand with a denormal. x86-64-v4 writes none of it, and a Q
// that is not exact bf16 (scaled while staged) keeps the f32 path.
func TestDotBF16Shape(t *testing.T) {
	_, after := scheduleBF16Tile(t, bf16Level, prefillRows)
	text := after.String()
	for _, want := range []string{"alloc qs_bp: i32[640]", "alloc kb_bp: i32[768]", "alloc kb_t: f32[1536]", "var qs_bpden = ", "var kb_bpden = "} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	if i, j := strings.Index(text, "var qs_bpden"), strings.Index(text, "for kt in"); i < 0 || j < 0 || i > j {
		t.Errorf("Q's pairs are not packed before the KV tile loop")
	}
	if strings.Count(text, "store qs_bp[") != 1 {
		t.Errorf("Q packed %d times, want once", strings.Count(text, "store qs_bp["))
	}
	steps := 0
	loopProducts(after.Kernels[0].Body, "bm_k", func(_ *ir.For, dots, fmas int) {
		if dots > 0 {
			steps++
			if fmas != 0 || dots%3 != 0 || dots > 24 {
				t.Errorf("a bf16 step holds %d dotbf16 and %d muladd, want 3 per row of at most 8", dots, fmas)
			}
		}
	})
	if steps == 0 {
		t.Errorf("no dotbf16 contraction loop:\n%s", text)
	}
	if !strings.Contains(text, "if ((qs_bpden | kb_bpden) != 0)") {
		t.Errorf("no fallback on denormal operands")
	}
	_, v4 := scheduleBF16Tile(t, "x86-64-v4", prefillRows)
	if s := v4.String(); strings.Contains(s, "dotbf16") || strings.Contains(s, "_bp") {
		t.Errorf("x86-64-v4 runs bf16 pairs")
	}
	scaled := parseBF16Tile(t, bf16Level, prefillRows)
	scaled.Kernels[0].Body = ir.MapStmts(scaled.Kernels[0].Body, func(s ir.Stmt) []ir.Stmt {
		if st, ok := s.(*ir.Store); ok && st.Buf == "qs" {
			if _, ok := st.Value.(*ir.Convert); ok {
				return []ir.Stmt{&ir.Store{Buf: "qs", Index: st.Index, Value: ir.Bin(ir.Mul, st.Value, ir.Float(0.1))}}
			}
		}
		return []ir.Stmt{s}
	})
	mc, _ := NewMachine("")
	got, err := mc.BlockMatMul(scaled)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got.String(), "dotbf16") {
		t.Errorf("a Q that is not exact bf16 runs on bf16 pairs")
	}
}

// loopProducts calls f with each loop over v in body and the dotbf16 and
// muladd expressions its body holds.
func loopProducts(body *ir.Block, v string, f func(loop *ir.For, dots, fmas int)) {
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		loop, ok := s.(*ir.For)
		if !ok || loop.Var != v {
			return []ir.Stmt{s}
		}
		dots, fmas := 0, 0
		ir.MapStmtExprs(loop.Body, func(e ir.Expr) ir.Expr {
			ir.VisitExpr(e, func(n ir.Expr) {
				switch n.(type) {
				case *ir.DotBF16:
					dots++
				case *ir.MulAdd:
					fmas++
				}
			})
			return e
		})
		f(loop, dots, fmas)
		return []ir.Stmt{s}
	})
}

// TestDotBF16KeepsResults runs the tile in the interpreter after
// block-matmul at x86-64-v4-bf16 (ir.DotBF16 as vdpbf16ps computes it,
// denormal inputs read as zero) on random bf16 Q and K and on ones with
// denormals: every score within f32 accumulation's bound of the exact dot
// product (K·2^-24·Σ|q·k|). With a denormal q (or k) element weighted by
// 2^120, what vdpbf16ps would flush is 2^-10 of the score: only the
// f32 fallback meets the bound there.
func TestDotBF16KeepsResults(t *testing.T) {
	_, after := scheduleBF16Tile(t, bf16Level, prefillRows)
	rows := prefillRows
	rng := rand.New(rand.NewSource(5))
	for _, tc := range []struct {
		name     string
		denormal bool
		mr, n    int
	}{{"random", false, 40, 48}, {"random cut", false, 37, 33}, {"denormal q", true, 40, 48}, {"denormal k", true, 13, 47}} {
		q, k := make([]uint16, rows*32), make([]uint16, 1536)
		for i := range q {
			q[i] = bf16Bits(float32(rng.NormFloat64()))
		}
		for i := range k {
			k[i] = bf16Bits(float32(rng.NormFloat64()))
		}
		if tc.denormal {
			// Row 3 (column 7) and row 11 (column 20) of Q against
			// position 5 of K: one operand denormal, the other 2^120,
			// the rest of that row and position small.
			for d := 0; d < 32; d++ {
				q[3*32+d] = bf16Bits(float32(rng.Float64() * 0x1p-20))
				q[11*32+d] = bf16Bits(float32(rng.Float64() * 0x1p-20))
				k[5*32+d] = bf16Bits(float32(rng.Float64() * 0x1p-20))
			}
			if tc.name == "denormal q" {
				q[3*32+7] = 0x0003 // 3·2^-133
				k[5*32+7] = bf16Bits(0x1p120)
			} else {
				k[5*32+20] = 0x8005 // -5·2^-133
				q[11*32+20] = bf16Bits(0x1p120)
			}
		}
		args := map[string]any{"q": q, "k": k, "s": make([]float32, rows*48), "m": int32(tc.mr), "n": int32(tc.n)}
		if st, err := ir.Run(after, after.Kernels[0].Name, args); err != nil || st != 0 {
			t.Fatalf("%s: status %d, %v", tc.name, st, err)
		}
		s := args["s"].([]float32)
		for r := 0; r < tc.mr; r++ {
			for j := 0; j < tc.n; j++ {
				var exact, mag float64
				for d := 0; d < 32; d++ {
					p := bf16Value(q[r*32+d]) * bf16Value(k[j*32+d])
					exact += p
					mag += math.Abs(p)
				}
				// Written as !(err <= bound), so that a NaN score fails.
				if got := float64(s[r*48+j]); !(math.Abs(got-exact) <= 32*0x1p-24*mag) {
					t.Errorf("%s: score[%d, %d] = %g, exact %g (bound %g)", tc.name, r, j, got, exact, 32*0x1p-24*mag)
				}
			}
		}
	}
}

// TestDenormFlag evaluates packPairs' denormal test in the interpreter: a
// tile of zeros, normals, infinities and NaNs of either sign leaves the
// flag 0; one denormal f32 (as bf16 it is one too) anywhere sets it.
func TestDenormFlag(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0x1p-126, -0x1p-126, 0x1p127, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3.3e38}
	denormals := []uint32{0x00010000, 0x007F0000, 0x80010000, 0x80400000}
	run := func(vals []float32) int32 { return packFlag(t, vals, 0) }
	vals := make([]float32, 128)
	for i := range vals {
		vals[i] = specials[i%len(specials)]
	}
	if got := run(vals); got != 0 {
		t.Errorf("no denormal: flag %d", got)
	}
	for i, d := range denormals {
		v := append([]float32(nil), vals...)
		v[(37*i+5)%128] = math.Float32frombits(d)
		if got := run(v); got != 1 {
			t.Errorf("denormal %#x at %d: flag %d", d, (37*i+5)%128, got)
		}
	}
}

// packFlag is packPairs' flag (with limit) over the 128 values of vals,
// two rows of 64, evaluated in the interpreter.
func packFlag(t *testing.T, vals []float32, limit int64) int32 {
	t.Helper()
	k := lltest.Kernel("f", []*ir.Param{lltest.Buf("x", ir.F32), lltest.Buf("o", ir.I32)},
		append(append([]ir.Stmt{&ir.Alloc{Name: "p", T: ir.I32, Size: 64}}, packPairs("x", "p", "flag", 2, 64, 16, limit)...),
			lltest.Store("o", ir.Int(0), lltest.I32("flag")), lltest.Ret(ir.Int(0)))...)
	m := lltest.Module("f", k)
	ir.MustVerify("flag", m)
	o := make([]int32, 1)
	if st, err := ir.Run(m, "f", map[string]any{"x": vals, "o": o}); err != nil || st != 0 {
		t.Fatalf("status %d, %v", st, err)
	}
	return o[0]
}

// TestDotBF16Hardware compiles one dotbf16 at x86-64-v4-bf16 and runs it
// on this CPU (where it has AVX512-BF16) on random pairs, special values
// and denormals: vdpbf16ps gives what ir.DotBF16 says, bit for bit —
// products exact, the high pair's added first, denormal inputs and sums
// flushed.
func TestDotBF16Hardware(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" || !lltest.CPUInfoFlags()["avx512_bf16"] {
		t.Skip("this CPU lacks AVX512-BF16")
	}
	tc := lltest.NeedToolchain(t)
	m, err := ir.Parse(`module dp prefix dp
kernel dp_x86_64_v4_bf16 role decode level "x86-64-v4-bf16" (x: i32* [N], y: i32* [N], z: f32* [N], o: f32* [N] out, n: i32) {
  for i in 0 .. n serial {
    store o[(i * 16)] = dotbf16(x[(i * 16)]:i32x16, y[(i * 16)]:i32x16, z[(i * 16)]:f32x16)
  }
  return 0
}
`)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(9))
	special := []uint16{0, 0x8000, 0x0001, 0x807F, 0x0080, 0x3F80, 0xBF80, 0x7F7F, 0x7F80, 0xFF80, 0x1F80, 0x2000, 0x5F80, 0x6000}
	half := func() uint32 {
		if rng.Intn(3) == 0 {
			return uint32(special[rng.Intn(len(special))])
		}
		return uint32(bf16Bits(float32(rng.NormFloat64() * math.Exp2(float64(rng.Intn(60)-30)))))
	}
	const groups = 256
	x, y, z := make([]uint32, 16*groups), make([]uint32, 16*groups), make([]float32, 16*groups)
	for i := range x {
		x[i], y[i] = half()|half()<<16, half()|half()<<16
		switch rng.Intn(4) {
		case 0:
			z[i] = math.Float32frombits(rng.Uint32() & 0x807FFFFF) // denormal
		case 1:
			z[i] = 0
		default:
			z[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.Intn(40)-20)))
		}
	}
	arr := func(name, ct string, n int, v func(i int) uint32) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, "static uint32_t %s[%d] = {", name, n)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&sb, "%#x,", v(i))
		}
		return sb.String() + "};\n"
	}
	driver := arr("X", "", len(x), func(i int) uint32 { return x[i] }) + arr("Y", "", len(y), func(i int) uint32 { return y[i] }) +
		arr("Z", "", len(z), func(i int) uint32 { return math.Float32bits(z[i]) }) + fmt.Sprintf(`
static uint32_t O[%d];
int32_t dp_x86_64_v4_bf16(int32_t*, int32_t*, float*, float*, int32_t);
int main(void) {
	dp_x86_64_v4_bf16((int32_t*)X, (int32_t*)Y, (float*)Z, (float*)O, %d);
	for (int i = 0; i < %d; i++) printf("o%%d %%u\n", i, O[i]);
	return 0;
}
`, len(x), groups, len(x))
	b := build(t, tc, lltest.Module("dp", m.Kernels[0]), driver)
	if !strings.Contains(b.OptLL, "llvm.x86.avx512bf16.dpbf16ps.512") {
		t.Fatalf("no vdpbf16ps intrinsic in:\n%s", b.OptLL)
	}
	cmd := exec.Command(b.Exe)
	cmd.Env = os.Environ()
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	got := lltest.Results(t, string(out))
	want := make([]float32, len(x))
	if st, err := ir.Run(m, m.Kernels[0].Name, map[string]any{"x": u32s(x), "y": u32s(y), "z": z, "o": want, "n": int32(groups)}); err != nil || st != 0 {
		t.Fatalf("interpreter: status %d, %v", st, err)
	}
	bad := 0
	for i := range want {
		if g := got[fmt.Sprintf("o%d", i)]; g != fmt.Sprint(math.Float32bits(want[i])) && !(math.IsNaN(float64(want[i])) && isNaNBits(g)) {
			if bad++; bad <= 10 {
				t.Errorf("lane %d: x %#08x y %#08x z %#08x: vdpbf16ps %s, ir.DotBF16 %#08x", i, x[i], y[i], math.Float32bits(z[i]), g, math.Float32bits(want[i]))
			}
		}
	}
}

func u32s(x []uint32) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

func isNaNBits(s string) bool {
	var u uint32
	fmt.Sscan(s, &u)
	return math.IsNaN(float64(math.Float32frombits(u)))
}

// TestCPULevelBF16 runs <prefix>_cpu_level in fresh processes of two
// modules: one with a clone at x86-64-v4-bf16 picks it without
// ATTNC_CPU_LEVEL where CPUID says AVX512_BF16 (leaf 7 subleaf 1, EAX bit
// 5; /proc/cpuinfo's avx512_bf16) and x86-64-v4 is there, else the best
// of the others, and takes it forced only then; x86-64-v4 forced is
// index 2 in both. One without such a clone has three levels (its CPU's
// best is at most x86-64-v4) and runs x86-64-v4 when the variable names
// x86-64-v4-bf16.
func TestCPULevelBF16(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("the levels tested are x86-64's")
	}
	tc := lltest.NeedToolchain(t)
	lvl := levelProbe()
	clone := &ir.Kernel{Name: "k_x86_64_v4_bf16", Role: ir.RoleDecode, Level: bf16Level, Body: lltest.Blk(lltest.Ret(ir.Int(0)))}
	driver := levelProbeDriver
	flags := lltest.CPUInfoFlags()
	v4 := flags["avx512f"] && flags["avx512bw"] && flags["avx512dq"] && flags["avx512vl"] && flags["avx512cd"] && flags["avx2"] && flags["fma"]
	hasBF16 := v4 && flags["avx512_bf16"]
	os.Unsetenv(LevelEnv)
	for _, withClone := range []bool{true, false} {
		ks := []*ir.Kernel{lvl}
		if withClone {
			// with k's clones at every level below, as multiversion
			// writes them (the runtime numbers the levels of the
			// module's clones)
			for _, l := range x86Levels[:3] {
				ks = append(ks, &ir.Kernel{Name: "k" + l.Suffix, Role: ir.RoleDecode, Level: l.Name, Body: lltest.Blk(lltest.Ret(ir.Int(0)))})
			}
			ks = append(ks, clone)
		}
		bl := build(t, tc, lltest.Module("lvl", ks...), driver)
		if strings.Contains(bl.LL, "k_x86_64_v4_bf16") != withClone {
			t.Errorf("clone %v: the module has the clone: %v", withClone, !withClone)
		}
		run := func(env ...string) map[string]string {
			cmd := exec.Command(bl.Exe)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %v", env, err)
			}
			return lltest.Results(t, string(out))
		}
		r := run()
		switch {
		case withClone && hasBF16:
			if r["name"] != bf16Level || r["index"] != "3" {
				t.Errorf("clone %v, AVX512_BF16: best level %v, want %s (3)", withClone, r, bf16Level)
			}
		default:
			if r["name"] == bf16Level || r["index"] == "3" {
				t.Errorf("clone %v, AVX512_BF16 %v: best level %v", withClone, hasBF16, r)
			}
		}
		if v4 {
			if r := run(LevelEnv + "=x86-64-v4"); r["name"] != "x86-64-v4" || r["index"] != "2" {
				t.Errorf("clone %v: x86-64-v4 forced: %v", withClone, r)
			}
		}
		// Forced: a library with the clone runs it where the CPU has
		// AVX512_BF16 and refuses it elsewhere; a library without it runs
		// its best level below, x86-64-v4, wherever the CPU runs that (one
		// ATTNC_CPU_LEVEL serves every library of a process).
		r = run(LevelEnv + "=" + bf16Level)
		switch {
		case withClone && hasBF16:
			if r["name"] != bf16Level || r["index"] != "3" {
				t.Errorf("clone %v: %s forced: %v", withClone, bf16Level, r)
			}
		case !withClone && v4:
			if r["name"] != "x86-64-v4" || r["index"] != "2" {
				t.Errorf("no clone: %s forced: %v, want x86-64-v4 (2)", bf16Level, r)
			}
		default:
			if r["name"] != "(null)" || r["index"] != "-1" {
				t.Errorf("clone %v, AVX512_BF16 %v: %s forced was not refused: %v", withClone, hasBF16, bf16Level, r)
			}
		}
	}
}
