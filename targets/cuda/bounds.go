package cuda

import (
	"strings"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets/gpu/host"
)

// Launch bounds. Every work kernel is printed with
// __launch_bounds__(BlockThreads, MinBlocksPerSM(k)): the assembler must
// then fit the kernel in the registers that many resident blocks leave a
// thread, so the occupancy below holds whatever ptxas version builds it,
// and the manifest can state it without running ptxas. The SASS test
// checks the real register counts and occupancy against these figures.

// AttentionMinBlocks is the resident blocks per SM an attention kernel
// (one with a KV tile loop) is bounded to when its shared memory allows:
// two, so that a split-KV decode's 2 x SMs blocks are all resident at
// once and one block's barriers and loads overlap another's MMAs.
const AttentionMinBlocks = 2

// LightMinBlocks is the bound of the other kernels (merge_state, the
// split merge, append, copy_page): 8 blocks of 128 threads, all 64 warps
// of an SM, within 64 registers.
const LightMinBlocks = 8

// boundArchs are the architectures the manifest states occupancy for.
var boundArchs = []string{"sm_80", "sm_90"}

// MinBlocksPerSM is the minBlocksPerMultiprocessor of a work kernel's
// __launch_bounds__: AttentionMinBlocks (or fewer, as many as sm_80's
// shared memory holds) for an attention kernel, LightMinBlocks otherwise.
func MinBlocksPerSM(k *ir.Kernel) int {
	if !host.HasTileLoop(k) {
		return LightMinBlocks
	}
	a := sass.Archs["sm_80"]
	fit := a.SmemPerSM / roundUp(cstyle.SharedBytes(k)+a.SmemReserved, a.SmemUnit)
	return max(1, min(AttentionMinBlocks, fit))
}

// MaxRegisters is the register budget per thread that
// __launch_bounds__(block, minBlocks) leaves: the most registers (a
// multiple of 8, at most 255) with which minBlocks blocks fit an SM's
// register file on every bound architecture.
func MaxRegisters(block, minBlocks int) int {
	for r := 255; r > 0; r-- {
		if r != 255 && r%8 != 0 {
			continue
		}
		ok := true
		for _, name := range boundArchs {
			o, err := sass.Archs[name].Occupancy(r, 0, block, 0)
			if err != nil || o.BlocksPerSM < minBlocks {
				ok = false
			}
		}
		if ok {
			return r
		}
	}
	return 0
}

// boundsOf fills a launch's bound, register budget and the occupancy
// that guarantees on each architecture (registers at the budget, the
// launch's shared memory); an architecture whose shared memory cannot
// hold one block (an f32 variant of head_dim above 512 on sm_80) is left
// out.
func boundsOf(k *ir.Kernel, lm *registry.LaunchManifest) {
	lm.MinBlocksPerSM = MinBlocksPerSM(k)
	lm.MaxRegisters = MaxRegisters(cstyle.BlockSize(k), lm.MinBlocksPerSM)
	lm.Occupancy = map[string]registry.OccupancyManifest{}
	for _, name := range boundArchs {
		o, err := sass.Archs[name].Occupancy(lm.MaxRegisters, 0, cstyle.BlockSize(k), cstyle.SharedBytes(k))
		if err != nil {
			continue
		}
		lm.Occupancy[name] = registry.OccupancyManifest{BlocksPerSM: o.BlocksPerSM, WarpsPerSM: o.WarpsPerSM,
			Limit: strings.Join(o.Limiters, "+")}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }
