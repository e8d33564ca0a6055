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
	Threads       int
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
	if s.Threads < 1 {
		s.Threads = 1
	}
	single := len(s.QLens) > 0
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
	if !single {
		return Selection{Role: ir.RolePrefill, Symbol: v.Name + "_prefill", Splits: 1, Items: len(s.QLens) * itemsPerSeq(v) * maxQT}, nil
	}
	items := len(s.QLens) * itemsPerSeq(v)
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
