package conformance

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// TestRepeatedPage runs prefill and decode over one sequence that names
// one 4-position page hundreds of times, on every harnessed target (the
// CPU at its host level, every level with -levels.all; CUDA and HIP
// emulated): f32 over 4096 positions at head dims 64 (the CPU's
// micro-kernels, the GPUs' SIMT products) and 8 (a width AVX-512's lanes
// do not divide: lower-tiles' row updates), and f16 over 3072 positions
// (the GPUs' tensor-core fragments). It is legal input (DESIGN §3 lets
// any page id repeat), and the worst case for a running f32 sum, whose
// terms repeat every 4 positions and round alike. An accumulator that
// chains every product of the sequence (a dot product or an mma fragment
// started from C, row updates made on C) drifted from the reference past
// the bounds: 741–834 units of 2^-24 mag, 2.5–2.8e-5, on the emulated
// GPUs' f32 path, 1.9–2.8e-5 at head dim 8 on x86-64-v4, 20–38 units
// (past reference.HalfAllowance's 16) for f16 on the emulated tensor
// cores with these seeds. One that sums each call's product from zero
// and adds it to C drifts with the number of KV tiles instead (f32 about
// 20–60 units, f16 here at most 10).
func TestRepeatedPage(t *testing.T) {
	t.Parallel()
	needTools(t)
	for _, c := range []repeatCase{
		{d: 64, dtype: "f32", n: 4096, seeds: []int64{1, 2}},
		{d: 8, dtype: "f32", n: 4096, seeds: []int64{1, 2}},
		{d: 64, dtype: "f16", n: 3072, seeds: []int64{6, 7, 8}},
	} {
		t.Run(fmt.Sprintf("%s_d%d", c.dtype, c.d), func(t *testing.T) { repeatedPage(t, c) })
	}
}

// repeatCase is one variant and sequence of TestRepeatedPage: head dim d,
// dtype, n positions, the case seeds.
type repeatCase struct {
	d     int
	dtype string
	n     int
	seeds []int64
}

// repeatVariant is TestRepeatedPage's variant for rc: 4/2 heads, head
// dim rc.d, rc.dtype, page size 4, no mask.
func repeatVariant(t *testing.T, rc repeatCase) *ir.Variant {
	return spec(t, fmt.Sprintf(`variant repeat_%s_d%d { heads qo = 4, kv = 2
	  head_dim %d
	  dtype %s
	  cache paged(page_size = 4)
	  mask none }`, rc.dtype, rc.d, rc.d, rc.dtype))
}

// repeatedPageCase is seed's case of v with q query rows over one
// sequence of n positions, every entry of its page table the first.
func repeatedPageCase(v *ir.Variant, seed int64, q, n int) *reference.Case {
	c := reference.NewCase(v, rand.New(rand.NewSource(seed)), reference.CaseSpec{QLens: []int{q}, KVLens: []int{n}})
	for i := range c.Pages[0] {
		c.Pages[0][i] = c.Pages[0][0]
	}
	return c
}

func repeatedPage(t *testing.T, rc repeatCase) {
	v := repeatVariant(t, rc)
	n := rc.n
	run := func(t *testing.T, s *Suite) {
		for _, seed := range rc.seeds {
			for _, role := range []ir.Role{ir.RolePrefill, ir.RoleDecode} {
				q := 4
				if role == ir.RoleDecode {
					q = 1
				}
				r := s.RunAttentionCase(role, repeatedPageCase(v, seed, q, n), 2)
				if !r.Pass {
					t.Errorf("%s, seed %d: %s (%.3g units of 2^-24 mag beyond rounding)", role, seed, r, r.MagErr)
					continue
				}
				t.Logf("%s, seed %d: %.3g units of 2^-24 mag beyond rounding", role, seed, r.MagErr)
			}
		}
	}
	for _, name := range Harnessed() {
		t.Run(name, func(t *testing.T) {
			if name != "cpu" {
				needEmu(t)
				s, err := BuildFor(v, name, t.TempDir(), Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				run(t, s)
				return
			}
			var s *Suite
			var err error
			if *levelsAll {
				s, err = Build(v, t.TempDir())
			} else {
				s, err = buildHostLevel(v, t.TempDir())
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if !*levelsAll {
				run(t, s)
				return
			}
			levels, err := s.Levels()
			if err != nil {
				t.Fatal(err)
			}
			for _, level := range levels {
				ls, err := s.AtLevel(level)
				if err != nil {
					t.Logf("level %s not run: %v", level, err)
					continue
				}
				t.Run(level, func(t *testing.T) { run(t, ls) })
				ls.Close()
			}
		})
	}
}
