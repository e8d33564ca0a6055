package isa

import (
	"fmt"
	"strings"
)

// Arch holds the per-CU limits that decide occupancy on one CDNA part.
//
// Sources: AMD's "AMD Instinct MI300 CDNA3 Instruction Set Architecture"
// (4 SIMDs per CU; wavefronts of 64; 512 VGPRs per SIMD lane, arch and
// accumulation registers from one file, so a wavefront of V registers
// leaves room for 512/V) and the MI300 hardware table of the ROCm
// documentation (64 KiB of LDS per CU, 8 wavefront slots per SIMD); the
// allocation granularities (VGPRs in blocks of 8, SGPRs of 16 out of 800
// per SIMD, LDS in 512-byte blocks) and the limit of 16 workgroups of more
// than one wavefront per CU (barrier resources) as LLVM's AMDGPU backend
// models them (AMDGPUBaseInfo: getVGPRAllocGranule,
// getOccupancyWithNumSGPRs, getMaxWorkGroupsPerCU).
type Arch struct {
	Name              string
	SIMDsPerCU        int
	WavesPerSIMD      int // wavefront slots
	Wavefront         int
	VGPRsPerSIMD      int // per lane, the unified file
	VGPRGranule       int
	SGPRsPerSIMD      int
	SGPRGranule       int
	LDSPerCU          int // bytes
	LDSGranule        int
	MaxGroupsPerCU    int // workgroups of more than one wavefront
	MaxThreadsPerBlk  int
	MaxVGPRsPerThread int
}

// Archs are the architectures attnc's HIP target is checked against.
var Archs = map[string]Arch{
	"gfx942": {Name: "gfx942", SIMDsPerCU: 4, WavesPerSIMD: 8, Wavefront: 64,
		VGPRsPerSIMD: 512, VGPRGranule: 8, SGPRsPerSIMD: 800, SGPRGranule: 16,
		LDSPerCU: 64 << 10, LDSGranule: 512, MaxGroupsPerCU: 16, MaxThreadsPerBlk: 1024, MaxVGPRsPerThread: 512},
}

// Occupancy is how many workgroups of one launch fit on a CU at once.
type Occupancy struct {
	GroupsPerCU int
	WavesPerCU  int
	// WavesPerSIMD is the wavefronts every SIMD is guaranteed
	// (WavesPerCU / SIMDs, rounded down).
	WavesPerSIMD int
	Fraction     float64 // WavesPerCU / the CU's wavefront slots
	// Limiters name what bounds GroupsPerCU ("waves", "VGPRs", "SGPRs",
	// "LDS", "workgroups"), every one that reaches the minimum.
	Limiters    []string
	LDSPerGroup int // static + dynamic LDS, rounded up to the granule
}

// String is "4 groups, 8/32 waves (25%), 2 per SIMD, VGPRs".
func (o Occupancy) String() string {
	return fmt.Sprintf("%d groups, %d waves (%.0f%%), %d per SIMD, %s", o.GroupsPerCU, o.WavesPerCU, 100*o.Fraction,
		o.WavesPerSIMD, strings.Join(o.Limiters, "+"))
}

// Occupancy computes the workgroups per CU of a launch of block
// work-items with dynLDS bytes of dynamic LDS, for a kernel of vgprs VGPRs
// (the unified count), sgprs SGPRs and staticLDS bytes of static LDS. An
// impossible launch is an error.
func (a Arch) Occupancy(vgprs, sgprs, staticLDS, block, dynLDS int) (Occupancy, error) {
	if block <= 0 || block > a.MaxThreadsPerBlk {
		return Occupancy{}, fmt.Errorf("isa: %s: a workgroup of %d work-items (1..%d)", a.Name, block, a.MaxThreadsPerBlk)
	}
	if vgprs < 0 || vgprs > a.MaxVGPRsPerThread {
		return Occupancy{}, fmt.Errorf("isa: %s: %d VGPRs (at most %d)", a.Name, vgprs, a.MaxVGPRsPerThread)
	}
	if staticLDS < 0 || dynLDS < 0 || sgprs < 0 {
		return Occupancy{}, fmt.Errorf("isa: %s: negative resources", a.Name)
	}
	lds := roundUp(staticLDS+dynLDS, a.LDSGranule)
	if lds > a.LDSPerCU {
		return Occupancy{}, fmt.Errorf("isa: %s: %d bytes of LDS per workgroup (static %d + dynamic %d) exceed %d",
			a.Name, staticLDS+dynLDS, staticLDS, dynLDS, a.LDSPerCU)
	}
	waves := (block + a.Wavefront - 1) / a.Wavefront
	slots := a.SIMDsPerCU * a.WavesPerSIMD
	big := int(^uint(0) >> 1)
	perSIMD := func(n int) int { return n * a.SIMDsPerCU / waves } // groups from waves per SIMD

	limWaves := slots / waves
	limVGPR := big
	if vgprs > 0 {
		limVGPR = perSIMD(a.VGPRsPerSIMD / roundUp(vgprs, a.VGPRGranule))
	}
	limSGPR := big
	if sgprs > 0 {
		limSGPR = perSIMD(a.SGPRsPerSIMD / roundUp(sgprs, a.SGPRGranule))
	}
	limLDS := big
	if lds > 0 {
		limLDS = a.LDSPerCU / lds
	}
	limGroups := big
	if waves > 1 {
		limGroups = a.MaxGroupsPerCU
	}
	n := min(limWaves, limVGPR, limSGPR, limLDS, limGroups)
	o := Occupancy{GroupsPerCU: n, WavesPerCU: n * waves, LDSPerGroup: lds}
	o.WavesPerSIMD = o.WavesPerCU / a.SIMDsPerCU
	o.Fraction = float64(o.WavesPerCU) / float64(slots)
	for _, l := range []struct {
		name string
		lim  int
	}{{"waves", limWaves}, {"VGPRs", limVGPR}, {"SGPRs", limSGPR}, {"LDS", limLDS}, {"workgroups", limGroups}} {
		if l.lim == n {
			o.Limiters = append(o.Limiters, l.name)
		}
	}
	return o, nil
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }
