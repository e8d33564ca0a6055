package cli

import (
	"fmt"

	"github.com/attnc/attnc"
)

// Numeric flags are bounded to what the ABI represents, with the bounds
// Result.Select checks (attnc.ThreadsBound, ...), and the error says the
// bound: a value outside is refused before any work (a batch of 2147483647
// is explained without listing its sequences).
// checkRange refuses any value of flag outside lo..b.Hi; b.Why names the
// bound.
func checkRange(cmd, flag string, xs []int, lo int, b attnc.Bound) error {
	b.Lo = lo
	for _, x := range xs {
		if err := b.Check(flag, x); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
	}
	return nil
}

// checkThreads bounds a thread-count flag to attnc.ThreadsBound.
func checkThreads(cmd string, xs []int) error {
	return checkRange(cmd, "--threads", xs, attnc.ThreadsBound.Lo, attnc.ThreadsBound)
}

// checkSMs bounds a multiprocessor-count flag to attnc.SMsBound.
func checkSMs(cmd string, xs []int) error {
	return checkRange(cmd, "--sms", xs, attnc.SMsBound.Lo, attnc.SMsBound)
}

// checkBatch bounds a batch-size flag (lo: 0 where an empty batch is
// meaningful).
func checkBatch(cmd string, xs []int, lo int) error {
	return checkRange(cmd, "--batch", xs, lo, attnc.BatchBound)
}

// checkSeqLen bounds a per-sequence length flag.
func checkSeqLen(cmd, flag string, xs []int, lo int) error {
	return checkRange(cmd, flag, xs, lo, attnc.SeqLenBound)
}
