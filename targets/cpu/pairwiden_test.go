package cpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
)

// TestPairWidenKeepsResults: decode over e4m3 and e5m2 caches with the
// codes read two vectors at a time (pairWiden: the Q·Kᵀ dot blocks' steps
// of 2L codes, the P·V micro-kernels' pairs of B vectors) gives every
// output bit that one load per vector gave, at every level clone (the
// interpreter). Head dim 32, so that both products pair at x86-64-v4's 16
// lanes too. The inputs hold every code (subnormals, the largest, ±0, NaN
// in one K page and one V page), queries with subnormals, ±65504, zeros
// and an infinity (specialCodes). The test checks that the pairs were
// written in the native-half clones, so it cannot pass by pairing
// nothing.
func TestPairWidenKeepsResults(t *testing.T) {
	defer func() { pairCodes = true }()
	for _, c := range []decodeCase{
		{ir.DTF16, ir.DTE4M3, ir.KVScalePerTensor}, {ir.DTBF16, ir.DTE4M3, ir.KVScalePerHead},
		{ir.DTF16, ir.DTE5M2, ir.KVScalePerTensor}, {ir.DTF32, ir.DTE5M2, ir.KVScalePerHead},
	} {
		v := decodeVariant(c)
		v.HeadDimQK, v.HeadDimV = 32, 32
		m0, err := lower.Lower(v, Target{}.Tiling(v))
		if err != nil {
			t.Fatal(err)
		}
		var outs [2]map[string]map[string]any
		for i, pair := range []bool{false, true} {
			pairCodes = pair
			m, err := passes.RunTable(Table, m0, passes.Options{VerifyEach: true})
			if err != nil {
				t.Fatalf("%s pair=%v: %v", c.name(), pair, err)
			}
			clones := 0
			for _, k := range m.Kernels {
				if k.Role != ir.RoleDecode || !strings.HasPrefix(k.Name, "t_decode_work") || k.Level == "" {
					continue
				}
				text := k.String()
				native := strings.Contains(k.Name, "_work_x86_64_v")
				for _, w := range []string{"let db_w0", "let bm_w0"} {
					if got := strings.Contains(text, w); got != (pair && native) {
						t.Fatalf("%s pair=%v %s: %q written: %v", c.name(), pair, k.Name, w, got)
					}
				}
				if native {
					clones++
				}
			}
			if clones != 2 {
				t.Fatalf("%s: %d native-half decode clones, want 2", c.name(), clones)
			}
			outs[i] = map[string]map[string]any{}
			runSpecialDecodes(t, fmt.Sprintf("%s pair=%v", c.name(), pair), m, v, outs[i])
		}
		sameOutputs(t, c.name(), outs, 3, "one load per vector", "pairs")
	}
}
