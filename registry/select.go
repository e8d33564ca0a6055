package registry

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
)

// KVTile is the KV positions per tile of the generated kernels.
const KVTile = lower.KVTile

func queryTile(v *ir.Variant) int { return lower.QTile(lower.HeadTile(v.GroupSize())) }

// itemsPerSeq is the CPU work items per sequence and query tile: kv heads
// times the head tiles a GQA group splits into.
func itemsPerSeq(v *ir.Variant) int { return v.KVHeads * v.GroupSize() / lower.HeadTile(v.GroupSize()) }

// Shape is a call's shape.
type Shape struct {
	QLens, KVLens []int
	// Batch, when > 0, is the number of sequences, all with the one length
	// QLens and KVLens then hold: a batch too large to list.
	Batch   int
	Threads int
	// DecodeLayout says q rows are laid out one per sequence (q[b]), as the
	// decode entry and the prefill entry's decode dispatch require.
	DecodeLayout bool
}

// Selection is what serves a call.
type Selection struct {
	Role   ir.Role // prefill or decode
	Symbol string  // the kernel that does the work
	Splits int     // KV chunks per (sequence, kv head) item; > 1 adds a merge
	Items  int     // parallel work items
	Merge  bool    // chunks are merged with the merge_state update
	// TooLarge says the call needs more than lower.MaxItems work items: the
	// entry returns TOO_LARGE without computing anything (Items is 0).
	TooLarge bool
}

// Select chooses the kernel for a call of variant v (lowered module m) on
// the CPU: decode when every sequence has one query token, prefill
// otherwise; split-KV decode plus merge when (sequence, kv head) items are
// fewer than threads. The split count is m's @plan_splits Def evaluated by
// the IR interpreter: the very expression the decode entry compiles.
func Select(v *ir.Variant, m *ir.Module, s Shape) (Selection, error) {
	if len(s.QLens) != len(s.KVLens) {
		return Selection{}, fmt.Errorf("shape: %d q lengths but %d kv lengths", len(s.QLens), len(s.KVLens))
	}
	n := len(s.QLens)
	if s.Batch > 0 {
		if n != 1 {
			return Selection{}, fmt.Errorf("shape: a batch of %d needs one q and one kv length, got %d", s.Batch, n)
		}
		n = s.Batch
	}
	if s.Threads < 1 {
		s.Threads = 1
	}
	single := n > 0
	maxQT, maxTiles := 0, 0
	for i, q := range s.QLens {
		if q > s.KVLens[i] && !v.NonCausal() { // mask none: cross attention takes any lengths
			return Selection{}, fmt.Errorf("shape: sequence %d has q_len %d > kv_len %d", i, q, s.KVLens[i])
		}
		single = single && q == 1
		qt := queryTile(v)
		maxQT = max(maxQT, (q+qt-1)/qt)
		maxTiles = max(maxTiles, (s.KVLens[i]+KVTile-1)/KVTile)
	}
	// Items in int64, as the entries count them: (sequence, kv head, head
	// tile) units capped at 2^31 so that the product cannot wrap.
	units := min(int64(n)*int64(itemsPerSeq(v)), lower.MaxItems+1)
	if !single {
		sel := Selection{Role: ir.RolePrefill, Symbol: v.Name + "_prefill", Splits: 1}
		if items := units * int64(maxQT); items > lower.MaxItems {
			sel.TooLarge = true
		} else {
			sel.Items = int(items)
		}
		return sel, nil
	}
	if units > lower.MaxItems {
		return Selection{Role: ir.RoleDecode, Symbol: v.Name + "_decode", Splits: 1, TooLarge: true}, nil
	}
	items := int(units)
	d := m.Def("plan_splits")
	if d == nil {
		return Selection{}, fmt.Errorf("module %s has no plan_splits rule", m.Name)
	}
	val, err := ir.EvalExpr(d.Body, map[string]any{"items": int32(items), "threads": int32(s.Threads), "max_tiles": int32(maxTiles)})
	if err != nil {
		return Selection{}, err
	}
	splits := int(val.(int32))
	return Selection{Role: ir.RoleDecode, Symbol: v.Name + "_decode", Splits: splits, Items: items * splits, Merge: splits > 1}, nil
}
