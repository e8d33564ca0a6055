package cli

import (
	"fmt"
	"math"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	"github.com/attnc/attnc/lower"
)

// Numeric flags are bounded to what the ABI represents, and the error says
// the bound: a value outside is refused before any work (a batch of
// 2147483647 is explained without listing its sequences).
const (
	maxBatch  = math.MaxInt32   // batch_size is an int32_t
	maxSeqLen = lower.MaxSeqLen // a sequence holds at most 2^30 tokens
)

// checkRange refuses any value of flag outside lo..hi; why names the bound.
func checkRange(cmd, flag string, xs []int, lo, hi int, why string) error {
	for _, x := range xs {
		if x < lo || x > hi {
			return fmt.Errorf("%s: %s %d is out of range: %s, %d..%d", cmd, flag, x, why, lo, hi)
		}
	}
	return nil
}

// checkThreads bounds a thread-count flag to 1..MaxThreads.
func checkThreads(cmd string, xs []int) error {
	return checkRange(cmd, "--threads", xs, 1, llvmgen.MaxThreads, "the kernels use at most this many threads")
}

// checkBatch bounds a batch-size flag.
func checkBatch(cmd string, xs []int, lo int) error {
	return checkRange(cmd, "--batch", xs, lo, maxBatch, "batch_size is an int32_t")
}

// checkSeqLen bounds a per-sequence length flag.
func checkSeqLen(cmd, flag string, xs []int, lo int) error {
	return checkRange(cmd, flag, xs, lo, maxSeqLen, "a sequence holds at most 2^30 tokens")
}
