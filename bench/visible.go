package bench

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// visibleRows counts the kv positions 0..kvLen-1 that the query at
// position q sees (reference.Visible at head 0): the rows of visibleSpans.
// exact is false for tree and custom masks, whose visibility depends on
// run-time tables: they are counted as causal, an upper bound.
func visibleRows(v *ir.Variant, q, kvLen int) (n int64, exact bool) {
	for _, sp := range visibleSpans(v, q, kvLen) {
		n += int64(sp[1] - sp[0])
	}
	for _, m := range v.Masks {
		if m.Kind == ir.MaskTree || m.Kind == ir.MaskCustom {
			return n, false
		}
	}
	return n, true
}

// visiblePairs counts, over the queries of one sequence with qLen new
// tokens at the end of kvLen cached ones, the (query, kv) pairs head 0
// sees.
func visiblePairs(v *ir.Variant, qLen, kvLen int) (n int64, exact bool) {
	exact = true
	for i := range qLen {
		r, ok := visibleRows(v, kvLen-qLen+i, kvLen)
		n += r
		exact = exact && ok
	}
	return n, exact
}

// visibleSpans lists the kv positions the query at q sees as disjoint
// half-open intervals [lo, hi) in increasing order: the rows visibleRows
// counts (for a mask whose visibility depends on run-time tables, every
// row up to q, as visibleRows counts them).
func visibleSpans(v *ir.Variant, q, kvLen int) [][2]int {
	var spans [][2]int
	add := func(lo, hi int) { // hi exclusive; merges with the last span
		lo, hi = max(lo, 0), min(hi, kvLen)
		if lo >= hi {
			return
		}
		if n := len(spans); n > 0 && spans[n-1][1] >= lo {
			spans[n-1][1] = max(spans[n-1][1], hi)
			return
		}
		spans = append(spans, [2]int{lo, hi})
	}
	lo, hi := 0, kvLen-1
	closed := true
	for _, m := range v.Masks {
		switch m.Kind {
		case ir.MaskNone:
		case ir.MaskCausal:
			hi = min(hi, q)
		case ir.MaskWindow:
			hi = min(hi, q)
			lo = max(lo, q-m.Left)
		case ir.MaskTree, ir.MaskCustom:
			add(0, min(q, kvLen-1)+1)
			return spans
		default:
			closed = false
		}
	}
	if !closed {
		for kv := range kvLen {
			if reference.Visible(v, 0, 0, q, kv) {
				add(kv, kv+1)
			}
		}
		return spans
	}
	if s := v.Sinks; s != nil && s.Kind == ir.SinkTokens {
		add(0, min(s.Tokens, kvLen, q+1))
	}
	add(lo, hi+1)
	return spans
}
