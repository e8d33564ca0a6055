package conformance

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/amxemu"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/targets/cpu"
)

// overrideLL replaces the definition of internal function @name() in ll
// by one returning ret (the original stays, renamed, unused).
func overrideLL(t *testing.T, ll, name, typ, ret string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^define internal ` + regexp.QuoteMeta(typ) + ` @` + regexp.QuoteMeta(name) + `\(\)`)
	if len(re.FindAllStringIndex(ll, -1)) != 1 {
		t.Fatalf("no single definition of @%s() in the .ll", name)
	}
	ll = re.ReplaceAllLiteralString(ll, "define internal "+typ+" @"+name+".hw()")
	return ll + fmt.Sprintf("\ndefine internal %s @%s() {\nentry:\n\tret %s %s\n}\n", typ, name, typ, ret)
}

// amxEmulated builds variant v's x86-64-amx clone alone with the AMX
// emulator linked in, detect_level and amx_permit overridden in the .ll
// (this CPU lacks AMX), and returns its suite forced to the level. A
// variant with no kernel cloned at the level fails t.
func amxEmulated(t *testing.T, v *ir.Variant) *Suite {
	t.Helper()
	s := amxEmulatedIfCloned(t, v)
	if s == nil {
		t.Fatalf("no kernel of %s is cloned at x86-64-amx", v.Name)
	}
	return s
}

// amxEmulatedIfCloned is amxEmulated, or nil for a variant with no kernel
// cloned at x86-64-amx.
func amxEmulatedIfCloned(t *testing.T, v *ir.Variant) *Suite {
	t.Helper()
	amxemu.SkipOnAMXHardware(t)
	dir := t.TempDir()
	emu, err := amxemu.WriteSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	link := []string{"-fPIC", "-DAMXEMU_CONSTRUCTOR", emu}
	c, err := compileFor(v, "cpu", dir, Options{CPULevels: []string{"x86-64-amx"}})
	if err != nil {
		t.Fatal(err)
	}
	if !hasClone(c.Final, "x86-64-amx") {
		return nil
	}
	tg, h, err := harnessOf("cpu")
	if err != nil {
		t.Fatal(err)
	}
	s := newSuite(v, tg, h, c.Lowered, c.Final)
	s.so = filepath.Join(dir, v.Name+".so")
	llPath := filepath.Join(dir, v.Name+".ll")
	data, err := os.ReadFile(llPath)
	if err != nil {
		t.Fatal(err)
	}
	ll := overrideLL(t, string(data), s.Prefix+".detect_level", "i32", "4")
	ll = overrideLL(t, ll, s.Prefix+".amx_permit", "i1", "true")
	if err := os.WriteFile(llPath, []byte(ll), 0o644); err != nil {
		t.Fatal(err)
	}
	tc, err := cpurt.ToolchainFor("")
	if err != nil {
		t.Fatal(err)
	}
	tc.Link = link
	if err := tc.BuildShared(llPath, s.so); err != nil {
		t.Fatal(err)
	}
	ls, err := s.AtLevel("x86-64-amx")
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestAMXPrefillEmulated runs bf16 prefill's x86-64-amx clone — Q·Kᵀ on
// rt.amx_mm32's AMX tiles — under the tests' AMX emulator
// (internal/amxemu, linked into the kernel library and installed by its
// constructor) and checks it with the conformance rule against the
// float64 reference, on random cases and on TestBF16DenormalOperands'
// denormal operands (TDPBF16PS flushes them: those tiles must take the
// f32 micro-kernels; in Q and K, or in K only, in a pair's low or high
// half), one with infinite and tiny V values (split P·V's
// fallbacks). Since split P·V, P·V runs on the tiles too: the count of
// TDPBF16PS emulated must exceed what Q·Kᵀ alone issues. This CPU lacks
// AMX, so amxEmulated makes detect_level report it and amx_permit grant
// it in the .ll text, then forces the level. Emulated only: not a run on
// AMX hardware.
func TestAMXPrefillEmulated(t *testing.T) {
	needTools(t)
	// bf16Levels' files with the x86-64-amx clone only (--cpu-levels
	// x86-64-amx), written but not compiled: only the .ll with the level
	// detection overridden compiles, one clone instead of every level's
	// (the other levels of the same variant run in
	// TestBF16DenormalOperands and TestCPULevelsBuild).
	v := spec(t, bf16Levels)
	ls := amxEmulated(t, v)
	defer ls.Lib.Close()
	d := v.HeadDimQK
	denormal := func(rng *rand.Rand) float32 {
		if rng.Intn(5) == 0 {
			return 0
		}
		return float32(math.Ldexp(float64(1+rng.Intn(127)), -133) * float64(1-2*rng.Intn(2)))
	}
	cases := 0
	for seed := int64(1); seed <= 3; seed++ {
		for _, den := range []bool{false, true} {
			rng := rand.New(rand.NewSource(seed))
			c := reference.NewCase(v, rng, reference.CaseSpec{Name: fmt.Sprintf("seed %d denormal %v", seed, den), QLens: []int{70, 33, 128}, KVLens: []int{150, 97, 128}})
			if den && seed == 3 {
				// Split P·V's fallbacks: an infinite V value (hidden
				// from the rows before its position, seen by the rows
				// after) and V values below 2^-100.
				c.Name += ", inf and tiny V"
				for i := range c.VPages {
					switch i % 997 {
					case 500:
						c.VPages[i] = float32(math.Inf(1))
					case 3, 40:
						c.VPages[i] = 0x1.8p-110
					}
				}
			}
			if den {
				// Seed 1: denormals in Q and K; seeds 2 and 3: in K
				// only, at an even element (a pair's low half) and at
				// an odd one (its high half), so K's own check must
				// send the tiles to the f32 micro-kernels.
				kd := 9
				if seed == 2 {
					kd = 8
				}
				for i := range c.Q {
					switch i % d {
					case 5:
						// Against K's 2^120 there: 0 (not a denormal)
						// past seed 1, so no score dwarfs the rest.
						c.Q[i] = 0
						if seed == 1 {
							c.Q[i] = denormal(rng)
						}
					case kd:
						c.Q[i] = 0x1p116
					}
				}
				for i := range c.KPages {
					switch i % d {
					case 5:
						if rng.Intn(3) == 0 {
							c.KPages[i] = 0x1p120
						}
					case kd:
						c.KPages[i] = denormal(rng)
					}
				}
			}
			r := ls.RunAttentionCase(ir.RolePrefill, c, 2)
			if !r.Pass {
				t.Errorf("x86-64-amx (emulated): %s", r)
			} else {
				t.Logf("x86-64-amx (emulated): %s", r)
			}
			cases++
		}
	}
	dps, err := ls.Lib.Call("amxemu_count_dp")
	if err != nil {
		t.Fatal(err)
	}
	if dps == 0 {
		t.Fatal("no TDPBF16PS ran: the x86-64-amx clone did not use the tiles")
	}
	// Q·Kᵀ alone issued 2928 on these cases (before split P·V, 2026-12-03).
	if dps < 2*2928 {
		t.Fatalf("%d TDPBF16PS emulated: P·V did not run on the tiles", dps)
	}
	all, err := ls.Lib.Call("amxemu_count")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d prefill cases at x86-64-amx (emulated), %d TDPBF16PS emulated, %d AMX instructions in all", cases, dps, all)
}

// f16Levels is bf16Levels over f16.
const f16Levels = `variant f16_levels { heads qo = 4, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  mask causal }`

// f16AMXSpecs are the f16 variants TestAMXPrefillF16Emulated runs: GQA,
// head dims 192/128 (MHA, page 64), a sliding window with a softcap
// (GQA 4, page 8).
var f16AMXSpecs = []string{f16Levels,
	`variant f16_qk192 { heads qo = 4, kv = 4
	  head_dim qk = 192, v = 128
	  dtype f16
	  cache paged(page_size = 64)
	  mask causal }`,
	`variant f16_window_softcap { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 8)
	  mask window(size = 40)
	  score softcap(score, 30.0) }`}

// TestAMXPrefillF16Emulated runs f16 prefill's x86-64-amx clones under the
// AMX emulator: Q·Kᵀ and P·V as split products on the tiles (Q and K in
// two bf16 parts, P in three, V in two), on random cases and on one with
// infinite V values (the f32 fallback), for each of f16AMXSpecs, checked
// with the conformance rule against the float64 reference, with
// cpu.AMXHalfProducts on (off by default). Emulated only: not a run on AMX
// hardware.
func TestAMXPrefillF16Emulated(t *testing.T) {
	needTools(t)
	// f16's split products stay off the tiles unless switched on.
	defer cpu.AMXHalfProducts(true)()
	for _, src := range f16AMXSpecs {
		v := spec(t, src)
		t.Run(v.Name, func(t *testing.T) {
			ls := amxEmulated(t, v)
			defer ls.Lib.Close()
			for seed := int64(1); seed <= 2; seed++ {
				rng := rand.New(rand.NewSource(seed))
				c := reference.NewCase(v, rng, reference.CaseSpec{Name: fmt.Sprintf("seed %d", seed), QLens: []int{70, 128}, KVLens: []int{150, 128}})
				if seed == 2 {
					c.Name += ", inf V"
					for i := range c.VPages {
						if i%997 == 500 {
							c.VPages[i] = float32(math.Inf(1))
						}
					}
				}
				r := ls.RunAttentionCase(ir.RolePrefill, c, 2)
				if !r.Pass {
					t.Errorf("x86-64-amx (emulated): %s", r)
				} else {
					t.Logf("x86-64-amx (emulated): %s", r)
				}
			}
			dps, err := ls.Lib.Call("amxemu_count_dp")
			if err != nil {
				t.Fatal(err)
			}
			if dps == 0 {
				t.Fatal("no TDPBF16PS ran: the x86-64-amx clone did not use the tiles")
			}
			all, err := ls.Lib.Call("amxemu_count")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d TDPBF16PS emulated, %d AMX instructions in all", dps, all)
		})
	}
}

// TestAMXGroupsEmulated runs bf16 prefill at x86-64-amx under the AMX
// emulator for GQA groups of 7 and 3 heads, whose items the CPU tiling
// rounds to whole 32-row blocks (Tiling.RowQuantum: 448 rows for 7 heads,
// whose items take cpu.PrefillRows' 256 rows, where 7 × 36 = 252 would
// have no x86-64-amx clone; 192 for 3 heads at 128 rows, not 3 × 42 =
// 126), against
// the float64 reference: query lengths that fill an item, end inside one
// (a last block of 32 rows partly past the item's rows) and span two.
// Emulated only: not a run on AMX hardware.
func TestAMXGroupsEmulated(t *testing.T) {
	needTools(t)
	for _, c := range []struct {
		name       string
		qo, kv, qt int // qt: the query rows of an item
	}{{"gqa7", 7, 1, 64}, {"gqa3", 6, 2, 64}} {
		t.Run(c.name, func(t *testing.T) {
			v := spec(t, fmt.Sprintf(`variant %s { heads qo = %d, kv = %d
			  head_dim 64
			  dtype bf16
			  cache paged(page_size = 16)
			  mask causal }`, c.name, c.qo, c.kv))
			if got := (cpu.Target{}).Tiling(v).QTile(v.GroupSize()); got != c.qt {
				t.Fatalf("an item holds %d query rows, want %d", got, c.qt)
			}
			ls := amxEmulated(t, v)
			defer ls.Lib.Close()
			for seed := int64(1); seed <= 2; seed++ {
				rng := rand.New(rand.NewSource(seed))
				cs := reference.NewCase(v, rng, reference.CaseSpec{Name: fmt.Sprintf("seed %d", seed),
					QLens: []int{c.qt, c.qt/2 + 3, 2*c.qt + 5}, KVLens: []int{c.qt + 40, 97, 2*c.qt + 5}})
				if r := ls.RunAttentionCase(ir.RolePrefill, cs, 2); !r.Pass {
					t.Errorf("x86-64-amx (emulated): %s", r)
				} else {
					t.Logf("x86-64-amx (emulated): %s", r)
				}
			}
			if dps, err := ls.Lib.Call("amxemu_count_dp"); err != nil || dps == 0 {
				t.Fatalf("%d TDPBF16PS emulated (%v): the tiles did not run", dps, err)
			}
		})
	}
}

// TestAMXExamplesEmulated runs the prefill matrix (and the ragged
// prefill's, where a variant has one) of every example with a kernel
// cloned at x86-64-amx — the bf16 ones — at that level under the tests'
// AMX emulator, at 2 threads, against the float64 reference: each
// example's features (windows, sinks, soft-capping, trees, custom masks,
// MLA, block tables) through the tiles' packing and products. The
// examples of examplesLong run with -examples.all (CI's long pass), as in
// TestExamples. Emulated only: not a run on AMX hardware.
func TestAMXExamplesEmulated(t *testing.T) {
	for _, v := range exampleVariants(t) {
		// One at a time: each library installs its own copy of the
		// emulator's SIGILL handler, and the last one installed
		// would take every library's tile instructions.
		t.Run(v.Name, func(t *testing.T) {
			if !*examplesAll && slices.Contains(examplesLong, v.Name) {
				t.Skip("with -examples.all (CI's long pass, .ci/run), as in TestExamples")
			}
			needTools(t)
			ls := amxEmulatedIfCloned(t, v)
			if ls == nil {
				t.Skipf("no kernel of %s is cloned at x86-64-amx", v.Name)
			}
			defer ls.Lib.Close()
			var rs []Result
			for i, spec := range Matrix(v) {
				rs = append(rs, ls.RunAttention(ir.RolePrefill, spec, 5+int64(i), 2))
			}
			if _, ok := ls.Entries[ir.RolePrefillRagged]; ok {
				for i, spec := range RaggedMatrix(v) {
					rs = append(rs, ls.RunAttention(ir.RolePrefillRagged, spec, 5+int64(i), 2))
				}
			}
			recordAll(t, "example amx "+dtypeKey(v), rs)
			dps, err := ls.Lib.Call("amxemu_count_dp")
			if err != nil {
				t.Fatal(err)
			}
			if dps == 0 {
				t.Fatal("no TDPBF16PS ran: the x86-64-amx clone did not use the tiles")
			}
			t.Logf("%d prefill cases, %d TDPBF16PS emulated", len(rs), dps)
		})
	}
}

// TestAMXRepeatedPage is TestRepeatedPage's prefill at x86-64-amx (64
// query rows: two 32-row blocks of the tiles): bf16 over 4096 positions
// of one 4-position page, and f16 (cpu.AMXHalfProducts on: Q·Kᵀ and P·V
// as split products) over 1024 — on the tiles in hardware where the CPU
// has AMX (scripts/amx-check.sh runs it there), else under the AMX
// emulator. While the tiles started from the running output
// (rt.amx_mm32's acc loaded C's block), P·V chained every tile step of
// the sequence into it: emulated, bf16 18.7–41.3 units of 2^-24 mag
// beyond rounding with these seeds, f16 17.6–19 — past
// reference.HalfAllowance's 16, outputs rounded the other way (with 4
// query rows, as TestRepeatedPage has, the old chain still passed).
// Summed from zero and added once per call, the error is that of the
// other levels (at most 11 and 5.5 units here, emulated).
func TestAMXRepeatedPage(t *testing.T) {
	needTools(t)
	defer cpu.AMXHalfProducts(true)()
	for _, c := range []repeatCase{
		{d: 64, dtype: "bf16", n: 4096, seeds: []int64{2, 3, 4}},
		{d: 64, dtype: "f16", n: 1024, seeds: []int64{1, 4}},
	} {
		t.Run(c.dtype, func(t *testing.T) {
			v := repeatVariant(t, c)
			run := func(t *testing.T, ls *Suite) {
				for _, seed := range c.seeds {
					r := ls.RunAttentionCase(ir.RolePrefill, repeatedPageCase(v, seed, 64, c.n), 2)
					if !r.Pass {
						t.Errorf("seed %d: %s (%.3g units of 2^-24 mag beyond rounding)", seed, r, r.MagErr)
						continue
					}
					t.Logf("seed %d: %.3g units of 2^-24 mag beyond rounding", seed, r.MagErr)
				}
			}
			t.Run("hardware", func(t *testing.T) {
				s, err := Build(v, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				ls, err := s.AtLevel("x86-64-amx")
				if err != nil {
					t.Logf("level x86-64-amx not run: %v", err)
					return
				}
				defer ls.Close()
				run(t, ls)
			})
			t.Run("emulated", func(t *testing.T) {
				ls := amxEmulated(t, v)
				defer ls.Lib.Close()
				run(t, ls)
				if dps, err := ls.Lib.Call("amxemu_count_dp"); err != nil || dps == 0 {
					t.Fatalf("no TDPBF16PS ran (%v): the x86-64-amx clone did not use the tiles", err)
				}
			})
		})
	}
}
