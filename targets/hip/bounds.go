package hip

import (
	"strings"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/codegen/hip/isa"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets/gpu/host"
)

// Launch bounds. Every work kernel is printed with
// __launch_bounds__(BlockThreads, MinWavesPerSIMD(k)) — HIP's meaning: at
// most BlockThreads work-items, at least that many wavefronts per SIMD —
// so the compiler must fit the kernel in the VGPRs that many wavefronts
// leave one (MaxVGPRs), and the manifest can state the occupancy without
// compiling. The isa check compares the real counts with these figures.

// AttentionMinWaves is the wavefronts per SIMD an attention kernel (one
// with a KV tile loop) is bounded to when its LDS allows: two, so that two
// workgroups of four wavefronts are resident on a CU — a split-KV
// decode's workers all at once, one group's barriers and loads
// overlapping the other's arithmetic — with 256 VGPRs each.
const AttentionMinWaves = 2

// LightMinWaves is the bound of the other kernels (merge_state, the split
// merge, the page kernels) but qkv_append, which is bounded as an
// attention kernel: every wavefront slot of a SIMD, 64 VGPRs.
const LightMinWaves = 8

// arch is the architecture the manifest states occupancy for.
const arch = "gfx942"

// MinWavesPerSIMD is a work kernel's second __launch_bounds__ argument:
// AttentionMinWaves (or fewer, as many as the LDS of a CU holds) for an
// attention kernel and for qkv_append, LightMinWaves otherwise.
func MinWavesPerSIMD(k *ir.Kernel) int {
	a := isa.Archs[arch]
	if !host.HasTileLoop(k) {
		if k.Role == ir.RoleQKVAppend {
			// A work-item holds a head row through the norm and the
			// rotation: 64 VGPRs would spill it to scratch.
			return AttentionMinWaves
		}
		return LightMinWaves
	}
	lds := roundUp(cstyle.SharedBytes(k), a.LDSGranule)
	groups := a.MaxGroupsPerCU
	if lds > 0 {
		groups = a.LDSPerCU / lds
	}
	fit := groups * (BlockThreads / Lanes) / a.SIMDsPerCU
	return max(1, min(AttentionMinWaves, fit))
}

// MaxVGPRs is the VGPR budget per work-item that minWaves wavefronts per
// SIMD leave (a multiple of the allocation granule).
func MaxVGPRs(minWaves int) int {
	a := isa.Archs[arch]
	return a.VGPRsPerSIMD / minWaves / a.VGPRGranule * a.VGPRGranule
}

// boundsOf fills a launch's bound, as the workgroups per CU it
// guarantees (the manifest's min_blocks_per_sm), its VGPR budget
// (max_registers) and the occupancy that gives on gfx942 (VGPRs at the
// budget, the launch's LDS).
func boundsOf(k *ir.Kernel, lm *registry.LaunchManifest) {
	a := isa.Archs[arch]
	w := MinWavesPerSIMD(k)
	lm.MaxRegisters = MaxVGPRs(w)
	lm.MinBlocksPerSM = w * a.SIMDsPerCU / (cstyle.BlockSize(k) / Lanes)
	lm.Occupancy = map[string]registry.OccupancyManifest{}
	if o, err := a.Occupancy(lm.MaxRegisters, 0, 0, cstyle.BlockSize(k), cstyle.SharedBytes(k)); err == nil {
		lm.Occupancy[arch] = registry.OccupancyManifest{BlocksPerSM: o.GroupsPerCU, WarpsPerSM: o.WavesPerCU,
			Limit: strings.Join(o.Limiters, "+")}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }
