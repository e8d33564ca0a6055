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
	{KVTile: 32, Rows: 16, PadRows: true, MaxHeads: 16, DecodeOneKernel: true},
	{KVTile: 16, Rows: 16, PadRows: true, MaxHeads: 16, DecodeOneKernel: true},
	{KVTile: 16, Rows: 8, PadRows: true, MaxHeads: 8, DecodeOneKernel: true},
	{KVTile: 8, Rows: 8, PadRows: true, MaxHeads: 8, DecodeOneKernel: true},
	{KVTile: 8, Rows: 4, PadRows: true, MaxHeads: 4, DecodeOneKernel: true},
	{KVTile: 4, Rows: 4, PadRows: true, MaxHeads: 4, DecodeOneKernel: true},
}

// FitTiling picks from Tilings by LDS, measured on the schedule itself
// (so it follows every pass): first a tiling of 16 rows (the MFMA's M:
// f16/bf16 tile matmuls run on the matrix cores) that leaves room for
// AttentionMinWaves wavefronts per SIMD (two workgroups per CU: half the
// LDS each), then one of 16 rows that fits the LDS at all (one workgroup
// per CU), then the others in the same two steps; failing all, the last.
// Within each step the larger tiles come first.
func FitTiling(v *ir.Variant) lower.Tiling {
	a := isa.Archs[arch]
	twoGroups := a.LDSPerCU * BlockThreads / Lanes / a.SIMDsPerCU / AttentionMinWaves
	lds := map[int]int{} // measured lazily: each is a lowering and a schedule
	measure := func(i int) int {
		if n, ok := lds[i]; ok {
			return n
		}
		n, ok := sharedBytes(v, Tilings[i])
		if !ok {
			n = -1
		}
		lds[i] = n
		return n
	}
	for _, mfma := range []bool{true, false} {
		for _, room := range []int{twoGroups, a.LDSPerCU} {
			for i, t := range Tilings {
				if (t.Rows == mfmaM) != mfma {
					continue
				}
				if n := measure(i); n >= 0 && n <= room {
					return t
				}
			}
		}
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
