package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/ir"
)

// vloopsKernel is a kernel of level lvl whose loops over j are the
// softmax's shapes: a copy, a scale with an if on a mask array, an
// exp-like body of lets, bit casts, shifts, selects and a multiply-add
// reading back the element it writes, and a copy out.
const vloopsKernel = `
kernel k%s role decode level %q (x: f32* [64], c: i32* [64], o: f32* [64] out, p: i32* [64] out, m: f32) {
  alloc sc: f32[64]
  alloc kv: i32[64]
  for j in 0 .. 64 vector {
    store sc[j] = x[j]
    store kv[j] = c[j]
  }
  for j in 0 .. 64 vector {
    var s = (sc[j] * 0.5:f32)
    if (kv[j] == 0) {
      s = -inf:f32
    } else {
      s = (s + m)
    }
    store sc[j] = s
  }
  for j in 0 .. 64 vector {
    let s_j = sc[j]
    let d = (s_j - m)
    let k = muladd(d, 1.4426950408889634:f32, 12583039.0:f32)
    let e = bitcast.f32((bitcast.i32(k) << 23))
    store sc[j] = select((s_j == -inf:f32), -0.0:f32, select((d < -10.0:f32), 0.0:f32, (e * max(d, -3.0:f32))))
    store kv[j] = min((kv[j] + 1), 7)
  }
  for j in 0 .. 64 vector {
    store o[j] = neg(abs(sc[j]))
    store p[j] = kv[j]
  }
  return 0
}
`

// TestVectorLoopsKeepResults runs the softmax-shaped loops of
// vloopsKernel, at every x86-64 level, in the interpreter before and
// after VectorLoops: every loop becomes a serial loop over blocks of the
// level's lanes with no vector loop left, and the outputs are the same
// bits.
func TestVectorLoopsKeepResults(t *testing.T) {
	t.Parallel()
	mc := defaultMachine
	var src strings.Builder
	src.WriteString("module v prefix v\n")
	for _, l := range mc.Arch.Levels {
		fmt.Fprintf(&src, vloopsKernel, l.Suffix, l.Name)
	}
	before, err := ir.Parse(src.String())
	if err != nil {
		t.Fatal(err)
	}
	after, err := mc.VectorLoops(before)
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.Verify(after); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	x, c := make([]float32, 64), make([]int32, 64)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 8)
		c[i] = int32(rng.IntN(3))
	}
	x[5] = float32(math.Inf(-1))
	for i, k := range after.Kernels {
		l := mc.Arch.Levels[i]
		text := k.String()
		if strings.Contains(text, " vector {") {
			t.Errorf("%s: a vector loop is left:\n%s", l.Name, text)
		}
		if want := fmt.Sprintf("for j_vb in 0 .. %d serial", 64/l.Lanes); l.Lanes > 1 && !strings.Contains(text, want) {
			t.Errorf("%s: no %q:\n%s", l.Name, want, text)
		}
		run := func(m *ir.Module) ([]float32, []int32) {
			o, p := make([]float32, 64), make([]int32, 64)
			st, err := ir.Run(m, k.Name, map[string]any{"x": x, "c": c, "o": o, "p": p, "m": float32(1.5)})
			if err != nil || st != 0 {
				t.Fatalf("%s: status %d, %v", k.Name, st, err)
			}
			return o, p
		}
		o0, p0 := run(before)
		o1, p1 := run(after)
		for e := range o0 {
			if math.Float32bits(o0[e]) != math.Float32bits(o1[e]) || p0[e] != p1[e] {
				t.Fatalf("%s: element %d: (%v, %d) after, (%v, %d) before", l.Name, e, o1[e], p1[e], o0[e], p0[e])
			}
		}
	}
}

// TestVectorLoopsLeaveOthers checks that loops VectorLoops cannot write
// lane by lane stay as they are: the loop variable as a value, a trip
// count that is not a multiple of the lanes or not constant, a load of
// an element another lane writes, a gather, a load in an if's branch, a
// loop-carried var, a store in an if, a libm call, a tagged loop.
func TestVectorLoopsLeaveOthers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, loop string }{
		{"j as a value", "for j in 0 .. 64 vector {\n store a[j] = f32(j)\n }"},
		{"trip count 60", "for j in 0 .. 60 vector {\n store a[j] = x[j]\n }"},
		{"trip count n", "for j in 0 .. n vector {\n store a[j] = x[j]\n }"},
		{"neighbour's element", "for j in 0 .. 48 vector {\n store a[j] = a[(j + 1)]\n }"},
		{"stored at two bases", "for j in 0 .. 32 vector {\n store a[j] = x[j]\n store a[(j + 32)] = a[j]\n }"},
		{"gather", "for j in 0 .. 64 vector {\n store a[j] = x[i[j]]\n }"},
		{"load under an if", "for j in 0 .. 64 vector {\n var s = 0.0:f32\n if (i[j] > 0) {\n s = x[j]\n }\n store a[j] = s\n }"},
		{"loop-carried var", "for j in 0 .. 64 vector {\n acc = (acc + x[j])\n }"},
		{"store under an if", "for j in 0 .. 64 vector {\n if (i[j] > 0) {\n store a[j] = x[j]\n }\n }"},
		{"exp", "for j in 0 .. 64 vector {\n store a[j] = exp(x[j])\n }"},
		{"serial", "for j in 0 .. 64 serial {\n store a[j] = x[j]\n }"},
	} {
		src := fmt.Sprintf(`module v prefix v
kernel k role decode level "x86-64-v4" (x: f32* [64], i: i32* [64], o: f32* [64] out, n: i32) {
  alloc a: f32[64]
  var acc = 0.0:f32
  %s
  store o[0] = (a[0] + acc)
  return 0
}
`, c.loop)
		m, err := ir.Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		out, err := defaultMachine.VectorLoops(m)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, want := out.Kernels[0].String(), m.Kernels[0].String(); got != want {
			t.Errorf("%s: rewritten:\n%s", c.name, got)
		}
	}
}

// scalarExpLoop matches a basic block of optimized LLVM IR that runs the
// exp polynomial's first step on one f32 (x·log2 e + 1.5·2^23) and
// ends a loop of 64 iterations (its exit compare against 64).
var scalarExpLoop = regexp.MustCompile(`(?s)call float @llvm\.fmuladd\.f32\(float %[\w.]+, float 0x3FF7154760000000.*icmp (eq|ne) i64 %[\w.]+, 64\n`)

// TestDecodeExpVectorizedOneRow builds decode for items of one row (MHA
// and a GQA group of one query head: 8/8 and 4/4 heads, f16 and f32),
// optimizes the .ll with opt -O3 as the users' builds do, and checks that
// no work kernel runs the softmax's exp one score at a time: a block that
// computes the polynomial on a scalar and closes a 64-iteration loop (the
// tile's scores). Before VectorLoops, LLVM's GVN moved the exp loop's
// first load into the loop's backedge, and the vectorizer left it scalar.
func TestDecodeExpVectorizedOneRow(t *testing.T) {
	t.Parallel()
	tc := lltest.NeedToolchain(t)
	for _, c := range []struct {
		heads, dtype string
	}{{"qo = 8, kv = 8", "f16"}, {"qo = 4, kv = 4", "f32"}} {
		name := c.heads + " " + c.dtype
		src := fmt.Sprintf("variant v {\n heads %s\n head_dim 128\n dtype %s\n cache paged(page_size = 16)\n mask causal\n kernels decode\n}\n", c.heads, c.dtype)
		vs, err := frontend.Parse("v.attn", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m, _ := compiled(t, vs[0], name)
		ll, err := emitLL(m, defaultMachine.Arch)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "k.ll"), []byte(ll), 0o644); err != nil {
			t.Fatal(err)
		}
		lltest.RunCmd(t, dir, tc.Opt, "-O3", "-S", "k.ll", "-o", "k.opt.ll")
		opt, err := os.ReadFile(filepath.Join(dir, "k.opt.ll"))
		if err != nil {
			t.Fatal(err)
		}
		works := 0
		for _, fn := range strings.Split(string(opt), "\ndefine ")[1:] {
			head, _, _ := strings.Cut(fn, "(")
			if !strings.Contains(head, "_decode_work_") {
				continue
			}
			works++
			for _, blk := range strings.Split(fn, "\n\n") {
				if scalarExpLoop.MatchString(blk) {
					t.Errorf("%s: %s runs the exp of a tile's scores one at a time:\n%s", name, head, blk)
				}
			}
		}
		if works == 0 {
			t.Fatalf("%s: no decode work kernel in the optimized IR", name)
		}
	}
}
