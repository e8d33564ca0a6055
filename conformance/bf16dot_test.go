package conformance

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// TestBF16DenormalOperands runs bf16 prefill with denormal Q and K
// elements that matter: every query's element 5 is a denormal (or zero)
// and some keys' element 5 is 2^120, every key's element 9 a denormal (or
// zero) and every query's element 9 is 2^116 (so their products, about
// 2^-13 .. 2^-10, move the scores by more than the output's allowance
// allows). x86-64-v4-bf16's vdpbf16ps reads denormals as zero: the output
// rule holds only because those tiles take the f32 micro-kernels. Decode
// (whose Q·Kᵀ runs on vdpbf16ps there too) runs the same data, whose
// queries send it to the f32 blocks, and keys with denormals against
// queries below 2^32 (the pairs run: a flushed product is below 2^-94).
// It runs at every level this CPU has; one it lacks is reported as not
// run.
func TestBF16DenormalOperands(t *testing.T) {
	t.Parallel()
	needTools(t)
	v := spec(t, bf16Levels) // the library hostLevelTable builds too
	s, err := Build(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	if !hasClone(s.Final, "x86-64-v4-bf16") {
		t.Fatalf("no kernel of %s is cloned at x86-64-v4-bf16", v.Name)
	}
	d := v.HeadDimQK
	denormal := func(rng *rand.Rand) float32 {
		if rng.Intn(5) == 0 {
			return 0
		}
		// A bf16 denormal: k·2^-133 for k in ±1..127.
		return float32(math.Ldexp(float64(1+rng.Intn(127)), -133) * float64(1-2*rng.Intn(2)))
	}
	newCase := func(seed int64, qLens []int, qHuge float32) *reference.Case {
		rng := rand.New(rand.NewSource(seed))
		c := reference.NewCase(v, rng, reference.CaseSpec{Name: "denormal q and k", QLens: qLens, KVLens: []int{150, 97}})
		for i := range c.Q {
			switch i % d {
			case 5:
				if qHuge > 0x1p32 {
					c.Q[i] = denormal(rng)
				}
			case 9:
				c.Q[i] = qHuge
			}
		}
		for i := range c.KPages {
			switch i % d {
			case 5:
				if rng.Intn(3) == 0 {
					c.KPages[i] = 0x1p120
				}
			case 9:
				c.KPages[i] = denormal(rng)
			}
		}
		return c
	}
	levels, err := s.Levels()
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	for _, level := range levels {
		ls, err := s.AtLevel(level)
		if err != nil {
			t.Logf("level %s not run: %v", level, err)
			continue
		}
		ran = ran || level == "x86-64-v4-bf16"
		for seed := int64(1); seed <= 2; seed++ {
			if r := ls.RunAttentionCase(ir.RolePrefill, newCase(seed, []int{70, 33}, 0x1p116), 2); !r.Pass {
				t.Errorf("level %s: %s", level, r)
			}
			for _, qHuge := range []float32{0x1p116, 0x1p31} {
				if r := ls.RunAttentionCase(ir.RoleDecode, newCase(seed, []int{1, 1}, qHuge), 2); !r.Pass {
					t.Errorf("level %s, decode, queries' element 9 %g: %s", level, qHuge, r)
				}
			}
		}
		ls.Lib.Close()
	}
	if !ran {
		t.Logf("level x86-64-v4-bf16 not run: this CPU lacks it")
	}
}
