package attnc

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
)

// Bound is the range a number of a call shape may take, and why: the one
// definition Result.Select and the command line's flags check against.
type Bound struct {
	Lo, Hi int
	Why    string
}

// The bounds of a call shape.
var (
	// ThreadsBound bounds a CPU call's worker threads (the worker count
	// of the target that runs on threads).
	ThreadsBound = workersBound("threads")
	// SMsBound bounds a GPU's multiprocessors (an H100 or H200 has 132).
	SMsBound = workersBound("sms")
	// BatchBound bounds the number of sequences of a call.
	BatchBound = Bound{1, math.MaxInt32, "batch_size is an int32_t"}
	// SeqLenBound bounds a sequence's q_len and kv_len.
	SeqLenBound = Bound{0, lower.MaxSeqLen, "a sequence holds at most 2^30 tokens"}
)

// workersBound is the bound of the registered targets' worker count named
// flag (targets.WorkerCount): 1 up to the largest any of them takes.
func workersBound(flag string) Bound {
	b := Bound{Lo: 1}
	for _, t := range targets.All() {
		if w, ok := t.(targets.WorkerCount); ok && w.Workers().Flag == flag && w.Workers().Max > b.Hi {
			b.Hi, b.Why = w.Workers().Max, w.Workers().Why
		}
	}
	return b
}

// boundOf is the bound of the call-shape field flag names.
func boundOf(flag string) Bound {
	if flag == "sms" {
		return SMsBound
	}
	return ThreadsBound
}

// Check returns an error naming what when x is outside b.
func (b Bound) Check(what string, x int) error {
	if x < b.Lo || x > b.Hi {
		return fmt.Errorf("%s %d is out of range: %s, %d..%d", what, x, b.Why, b.Lo, b.Hi)
	}
	return nil
}

// CheckShape validates a call shape for target tgt with the bounds above:
// the lengths (one q and one kv length per sequence, or one each with
// Batch), and the worker count the target takes (targets.WorkerCount:
// Threads for the cpu target, SMs for the cuda target; the other may be 0,
// never negative).
func CheckShape(tgt string, s registry.Shape) error {
	if len(s.QLens) != len(s.KVLens) {
		return fmt.Errorf("%d q lengths but %d kv lengths", len(s.QLens), len(s.KVLens))
	}
	if s.Batch < 0 {
		return BatchBound.Check("batch", s.Batch)
	}
	if s.Batch > 0 {
		if err := BatchBound.Check("batch", s.Batch); err != nil {
			return err
		}
		if len(s.QLens) != 1 {
			return fmt.Errorf("a batch of %d needs one q and one kv length, got %d", s.Batch, len(s.QLens))
		}
	} else if n := len(s.QLens); n > BatchBound.Hi {
		return fmt.Errorf("%d sequences listed: %s, at most %d", n, BatchBound.Why, BatchBound.Hi)
	}
	for i := range s.QLens {
		if err := SeqLenBound.Check(fmt.Sprintf("sequence %d: q_len", i), s.QLens[i]); err != nil {
			return err
		}
		if err := SeqLenBound.Check(fmt.Sprintf("sequence %d: kv_len", i), s.KVLens[i]); err != nil {
			return err
		}
	}
	// The worker count tgt's calls take must be in its bound; the others
	// may be 0, never negative.
	var own string
	if t, err := targets.Lookup(tgt); err == nil {
		if w, ok := t.(targets.WorkerCount); ok {
			own = w.Workers().Flag
		}
	}
	for _, f := range []struct {
		flag string
		n    int
	}{{"threads", s.Threads}, {"sms", s.SMs}} {
		if f.flag == own || f.n < 0 {
			if err := boundOf(f.flag).Check(f.flag, f.n); err != nil {
				return err
			}
		}
	}
	return nil
}
