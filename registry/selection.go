package registry

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// String says what serves the call in one line, as attnc explain prints
// it: the role and entry symbol, the work items (cpu), the KV split and
// merge, and each launch's grid, block and shared memory (GPU targets).
func (s Selection) String() string {
	if s.TooLarge {
		return fmt.Sprintf("%s via %s: status %d TOO_LARGE, more work items than the parallel loops count (nothing is computed; split the batch)", s.Role, s.Symbol, ir.StatusTooLarge)
	}
	out := fmt.Sprintf("%s via %s", s.Role, s.Symbol)
	if !s.Grids {
		out += fmt.Sprintf(", %d work items", s.Items)
	}
	if s.Splits > 1 {
		out += fmt.Sprintf(", KV split in %d chunks", s.Splits)
	}
	if s.Merge {
		out += ", merged with merge_state"
	}
	if s.Grids {
		for _, l := range s.Launches {
			out += fmt.Sprintf("; %s grid=%d block=%d smem=%d", l.Kernel, l.Grid, l.Block, l.Smem)
		}
	}
	return out
}
