package gpu

import (
	"fmt"

	"github.com/attnc/attnc/passes"
)

// Constraints are the ordering rules among the layer's passes (and the
// neutral legalize-dtype) that every GPU table listing them must keep.
var Constraints = []passes.Constraint{
	passes.Constraint{Before: "widen-copies", After: "pipeline-kv", Why: "pipeline-kv makes the 16-byte copies widen-copies grouped asynchronous"},
	passes.Constraint{Before: "pipeline-kv", After: "stage-shared", Why: "stage-shared hoists the ring arrays into shared memory and places the barriers around its phases"},
	passes.Constraint{Before: "simt-matmul", After: "map-threads", Why: "map-threads maps loops; a matmul left over has no thread mapping"},
	passes.Constraint{Before: "simt-matmul", After: "stage-codes", Why: "stage-codes rewrites the explicit loads simt-matmul writes for the matmuls' operands"},
	passes.Constraint{Before: "stage-codes", After: "widen-copies", Why: "the staging stores stage-codes leaves are byte row copies that widen-copies groups"},
	passes.Constraint{Before: "stage-codes", After: "legalize-dtype", Why: "the code arrays' loads and stores become u8 bits and the table's conversions in legalize-dtype"},
	passes.Constraint{Before: "widen-copies", After: "map-threads", Why: "the copies must be grouped before their loops are strided over threads"},
	passes.Constraint{Before: "map-warps", After: "map-threads", Why: "map-threads runs a spread holding a lanes loop one iteration per warp; a reduce left in a spread would have no lanes"},
	passes.Constraint{Before: "stage-shared", After: "map-threads", Why: "map-threads keeps the shared arrays stage-shared hoisted outside the threads loop, and the barriers it placed between phases"},
}

// Constraint is the layer's rule that before runs before after, for a
// target's table to list where it wants it; it panics if the layer has no
// such rule.
func Constraint(before, after string) passes.Constraint {
	for _, c := range Constraints {
		if c.Before == before && c.After == after {
			return c
		}
	}
	panic(fmt.Sprintf("gpu: no constraint %s before %s", before, after))
}
