package cuda_test

import (
	"path/filepath"
	"testing"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets/cuda"
)

// TestRingSlotsKeepTwoBlocks states pipeline-kv's rule on every example's
// attention kernels: a kernel whose K/V ring has two slots (async.wait 1)
// gets at least two resident blocks per SM on sm_80 and sm_90 with its
// shared memory and the register budget of its __launch_bounds__; a kernel
// with one slot (async.wait 0) would get fewer than two on some
// architecture with its ring tiles doubled. Both kinds must occur (gptj_6b's
// head_dim 256 tiles do not fit twice, llama3_8b's do).
func TestRingSlotsKeepTwoBlocks(t *testing.T) {
	specs, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.attn"))
	if err != nil || len(specs) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	vs, err := driver.ParseSpecs(specs)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int]int{}
	for _, v := range vs {
		c, err := driver.CompileFor(v, "cuda", driver.Options{})
		if err != nil {
			t.Logf("skip %s: %v", v.Name, err)
			continue
		}
		for _, k := range c.Final.Kernels {
			waits := map[int]bool{}
			ringBytes := map[string]int{}
			allocs := map[string]*ir.Alloc{}
			ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
				switch x := s.(type) {
				case *ir.Alloc:
					allocs[x.Name] = x
				case *ir.AsyncWait:
					waits[x.Pending] = true
				case *ir.Copy:
					if x.Async {
						ringBytes[x.Dst] = 0
					}
				}
				return []ir.Stmt{s}
			})
			if len(waits) == 0 {
				continue
			}
			if len(waits) != 1 {
				t.Errorf("%s: async waits for %v pending groups, want one kind", k.Name, waits)
				continue
			}
			// The tiles one slot takes: a two-slot ring's arrays hold two.
			n, slotBytes := 1, 0
			if waits[1] {
				n = 2
			}
			for name := range ringBytes {
				a := allocs[name]
				if a == nil || !a.Shared {
					t.Fatalf("%s: async copy into %s, not a shared array", k.Name, name)
				}
				slotBytes += (a.Size/n*a.T.Bits()/8 + 15) &^ 15
			}
			smem, block := cstyle.SharedBytes(k), cstyle.BlockSize(k)
			if n == 1 {
				smem += slotBytes
			}
			slots[n]++
			t.Logf("%s: %d ring slots", k.Name, n)
			minBlocks := cuda.MinBlocksPerSM(k)
			if n == 1 {
				minBlocks = 2 // the budget the kernel would ask for with two slots
			}
			regs := cuda.MaxRegisters(block, minBlocks)
			least := 1 << 30
			for _, arch := range []string{"sm_80", "sm_90"} {
				o, err := sass.Archs[arch].Occupancy(regs, 0, block, smem)
				if err != nil {
					least = 0
					continue
				}
				least = min(least, o.BlocksPerSM)
			}
			if n == 2 && least < 2 {
				t.Errorf("%s: two ring slots, %d bytes of shared memory: %d blocks per SM, want >= 2", k.Name, smem, least)
			}
			if n == 1 && least >= 2 {
				t.Errorf("%s: one ring slot, but with it doubled (%d bytes) the kernel still gets %d blocks per SM", k.Name, smem, least)
			}
		}
	}
	if slots[1] == 0 || slots[2] == 0 {
		t.Errorf("kernels with one ring slot: %d, with two: %d; the examples should have both", slots[1], slots[2])
	}
}
