package cpu

import (
	"regexp"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
)

// TestDecodeStageStoredKeepsResults lowers decode with K and V tiles
// staged as the cache stores them (Tiling.DecodeStageStored: the products
// widen B as they read it) and as f32 (the copy widens), runs the
// target-neutral passes (matmuls left to the interpreter) and the CPU
// pass table on both and interprets the neutral and every level's decode
// kernel on the same paged inputs — f16, bf16 and 8-bit caches, a hidden
// (-1) page, an empty sequence and a partial last tile: o and lse are bit
// for bit the same, so staging as stored changes where the widening
// happens, not what the kernel computes.
func TestDecodeStageStoredKeepsResults(t *testing.T) {
	for _, c := range decodeCases {
		if c.kv == ir.DTF32 { // stored is f32: nothing to widen
			continue
		}
		v := decodeVariant(c)
		want := regexp.MustCompile(`alloc (heap )?kb: ` + c.kv.Type().String() + `\[`)
		tilingSwitch{
			name: c.name(), v: v, at: func(tl *lower.Tiling) *bool { return &tl.DecodeStageStored },
			args:           func() map[string]any { return stagedDecodeArgs(v, nil) },
			scheduledShows: func(m *ir.Module) bool { return want.MatchString(m.String()) },
			as0:            "staged as f32", as1: "as stored",
		}.run(t)
	}
}
