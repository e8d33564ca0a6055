package registry

import (
	"testing"

	"github.com/attnc/attnc/ir"
)

func TestSelectionString(t *testing.T) {
	for _, c := range []struct {
		s    Selection
		want string
	}{
		{Selection{Target: "cpu", Role: ir.RolePrefill, Symbol: "m_prefill", Splits: 1, Items: 12},
			"prefill via m_prefill, 12 work items"},
		{Selection{Target: "cuda", Role: ir.RoleDecode, Symbol: "m_decode", Splits: 2, Merge: true, Grids: true,
			Launches: []LaunchSelection{{Kernel: "m_decode_work", Grid: 264, Block: 128, Smem: 4096}, {Kernel: "m_merge", Grid: 8, Block: 128}}},
			"decode via m_decode, KV split in 2 chunks, merged with merge_state; m_decode_work grid=264 block=128 smem=4096; m_merge grid=8 block=128 smem=0"},
		{Selection{Target: "cpu", Role: ir.RoleDecode, Symbol: "m_decode", TooLarge: true},
			"decode via m_decode: status -13 TOO_LARGE, more work items than the parallel loops count (nothing is computed; split the batch)"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}
