package cuda_test

import (
	"testing"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/plantest"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/cuda"
)

// TestInterpretCUDASchedule runs small variants' CUDA-scheduled work
// kernels — blocks of 128 threads meeting at barriers, warp shuffles,
// m16n8k16 mma fragments (f16, bf16; P split hi + lo), 16-byte copies,
// shared memory — in the IR interpreter against the float64 reference.
// The same schedule without its barriers must fail: the interpreter runs
// threads in an order that exposes a missing barrier.
func TestInterpretCUDASchedule(t *testing.T) {
	for _, src := range []string{
		`variant ci_f16 { heads qo = 4, kv = 2
		  head_dim 16
		  dtype f16
		  cache paged(page_size = 4)
		  mask causal }`,
		`variant ci_f32 { heads qo = 2, kv = 1
		  head_dim 8
		  dtype f32
		  cache paged(page_size = 8, layout = NHD)
		  mask window(left = 9)
		  sinks tokens(2) }`,
		`variant ci_bf16_bt { heads qo = 2, kv = 2
		  head_dim 16
		  dtype bf16
		  cache paged(page_size = 2, table = block_table)
		  score softcap(score, 3.0) }`,
	} {
		vs, err := frontend.Parse("interp.attn", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		v := vs[0]
		t.Run(v.Name, func(t *testing.T) {
			c, err := driver.CompileFor(v, "cuda", driver.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range plantest.RunPlans(v, c.Final) {
				t.Error(b)
			}
			removed := 0
			mutant := plantest.Mutate(c.Final, func(s ir.Stmt) []ir.Stmt {
				if _, ok := s.(*ir.Barrier); ok {
					removed++
					return nil
				}
				return []ir.Stmt{s}
			})
			if removed == 0 || len(plantest.RunPlans(v, mutant)) == 0 {
				t.Errorf("the schedule without its %d barriers still matches the reference", removed)
			}
		})
	}
}

// TestAccInRegisters checks that the P·V accumulator of an f16 variant is
// kept in per-thread registers for the whole work item (the shared
// accumulator is gone: zeroed, rescaled, accumulated and stored from the
// registers) and that the kernels still match the reference; without the
// rescale of the registers by exp(m_old - m_new) they must not. It holds
// for decode as one kernel serving the direct and the split launch too
// (lower.Tiling.DecodeOneKernel, which the CPU uses), whose stores of o
// and of the partial state each sit under `if nonnull(...)`.
func TestAccInRegisters(t *testing.T) {
	vs, err := frontend.Parse("interp.attn", []byte(`variant ci_acc { heads qo = 4, kv = 2
	  head_dim 16
	  dtype f16
	  cache paged(page_size = 4)
	  mask causal }`))
	if err != nil {
		t.Fatal(err)
	}
	v := vs[0]
	for _, tc := range []struct {
		name    string
		tgt     targets.Target
		kernels int // decode's work kernels
	}{{"two_decode_kernels", cuda.Target{}, 2}, {"one_decode_kernel", oneDecodeKernel{}, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := driver.Compile(v, tc.tgt, driver.Options{})
			if err != nil {
				t.Fatal(err)
			}
			decode := 0
			for _, k := range c.Final.Kernels {
				if k.Role != ir.RolePrefill && k.Role != ir.RoleDecode {
					continue
				}
				if k.Role == ir.RoleDecode {
					decode++
				}
				private, shared := false, false
				ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
					if x, ok := s.(*ir.Alloc); ok {
						private = private || (x.Name == "acc_reg" && !x.Shared)
						shared = shared || x.Name == "acc"
					}
					return []ir.Stmt{s}
				})
				if !private || shared {
					t.Errorf("%s: per-thread acc_reg %v, shared acc %v", k.Name, private, shared)
				}
			}
			if decode != tc.kernels {
				t.Fatalf("%d decode work kernels, want %d", decode, tc.kernels)
			}
			for _, b := range plantest.RunPlans(v, c.Final) {
				t.Error(b)
			}
			removed := 0
			mutant := plantest.Mutate(c.Final, func(s ir.Stmt) []ir.Stmt {
				if st, ok := s.(*ir.Store); ok && st.Buf == "acc_reg" {
					if b, ok := st.Value.(*ir.Binary); ok && b.Op == ir.Mul {
						if l, ok := b.X.(*ir.Load); ok && l.Buf == "acc_reg" {
							removed++
							return nil
						}
					}
				}
				return []ir.Stmt{s}
			})
			if removed == 0 || len(plantest.RunPlans(v, mutant)) == 0 {
				t.Errorf("the kernels without the %d rescales of the registers still match the reference", removed)
			}
		})
	}
}

// oneDecodeKernel is the CUDA target with decode's direct and split
// launches served by one work kernel (lower.Tiling.DecodeOneKernel).
type oneDecodeKernel struct{ cuda.Target }

func (oneDecodeKernel) Tiling(v *ir.Variant) lower.Tiling {
	t := cuda.Target{}.Tiling(v)
	t.DecodeOneKernel = true
	return t
}

// TestMMAPassesSkip runs the tensor-core passes one at a time: skipping
// acc-registers keeps the accumulator in shared memory around the mmas,
// skipping use-mma leaves the narrowed operands to simt-matmul (A and B
// widened where read); both schedules still match the reference.
func TestMMAPassesSkip(t *testing.T) {
	vs, err := frontend.Parse("interp.attn", []byte(`variant ci_skip { heads qo = 4, kv = 2
	  head_dim 16
	  dtype f16
	  cache paged(page_size = 4)
	  mask causal }`))
	if err != nil {
		t.Fatal(err)
	}
	v := vs[0]
	for _, c := range []struct {
		skip              string
		mma, regs, narrow bool
	}{
		{"acc-registers", true, false, true},
		{"use-mma", false, false, true},
	} {
		comp, err := driver.CompileFor(v, "cuda", driver.Options{Passes: passes.Options{VerifyEach: true, Skip: map[string]bool{c.skip: true}}})
		if err != nil {
			t.Fatalf("skip %s: %v", c.skip, err)
		}
		mma, regs, narrow := false, false, false
		for _, k := range comp.Final.Kernels {
			ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
				switch x := s.(type) {
				case *ir.MMA:
					mma = true
				case *ir.Alloc:
					regs = regs || x.Name == "acc_reg"
					narrow = narrow || x.T == ir.F16 || x.T == ir.I16
				}
				return []ir.Stmt{s}
			})
		}
		if mma != c.mma || regs != c.regs || narrow != c.narrow {
			t.Errorf("skip %s: mma %v registers %v narrowed arrays %v, want %v %v %v", c.skip, mma, regs, narrow, c.mma, c.regs, c.narrow)
		}
		for _, b := range plantest.RunPlans(v, comp.Final) {
			t.Errorf("skip %s: %s", c.skip, b)
		}
	}
}
