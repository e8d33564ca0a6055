package hip

import (
	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/codegen/hip/isa"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// Tilings are the work-item shapes the HIP target tries, largest first:
// KV tiles of 32, then 16, then 8 positions, on items of 16 (head, query)
// rows (padded: static shapes), then 8, then 4.
var Tilings = []lower.Tiling{
	{KVTile: 32, Rows: 16, PadRows: true, MaxHeads: 16},
	{KVTile: 16, Rows: 16, PadRows: true, MaxHeads: 16},
	{KVTile: 16, Rows: 8, PadRows: true, MaxHeads: 8},
	{KVTile: 8, Rows: 8, PadRows: true, MaxHeads: 8},
	{KVTile: 8, Rows: 4, PadRows: true, MaxHeads: 4},
	{KVTile: 4, Rows: 4, PadRows: true, MaxHeads: 4},
}

// FitTiling is the first of Tilings whose kernels, scheduled by Table,
// leave room for AttentionMinWaves wavefronts per SIMD (two workgroups per
// CU: at most half the LDS each); failing that, the first that fits the
// LDS at all (a CU's 64 KiB, one workgroup); failing that, the last. The
// choice comes from the schedule itself, so it follows every pass.
func FitTiling(v *ir.Variant) lower.Tiling {
	a := isa.Archs[arch]
	twoGroups := a.LDSPerCU * BlockThreads / Lanes / a.SIMDsPerCU / AttentionMinWaves
	var fits *lower.Tiling
	for i := range Tilings {
		lds, ok := sharedBytes(v, Tilings[i])
		if !ok {
			continue
		}
		if lds <= twoGroups {
			return Tilings[i]
		}
		if fits == nil && lds <= a.LDSPerCU {
			fits = &Tilings[i]
		}
	}
	if fits != nil {
		return *fits
	}
	return Tilings[len(Tilings)-1]
}

// sharedBytes is the most LDS a kernel of v takes when lowered with t and
// scheduled by Table; ok is false when v does not schedule with t.
func sharedBytes(v *ir.Variant, t lower.Tiling) (int, bool) {
	m, err := lower.Lower(v, t)
	if err != nil {
		return 0, false
	}
	if m, err = (Target{}).Assemble(m); err != nil {
		return 0, false
	}
	if m, err = passes.RunTable(Table, m, passes.Options{}); err != nil {
		return 0, false
	}
	most := 0
	for _, k := range m.Kernels {
		most = max(most, cstyle.SharedBytes(k))
	}
	return most, true
}
