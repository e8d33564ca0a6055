package registry

import (
	"fmt"

	"github.com/attnc/attnc/ir"
)

// ReclaimRule says which cached positions of a sequence a variant's kernels
// can never read again, so that an engine may reuse their pages: with a
// window every query sees at most WindowLeft positions to its left, plus
// the first SinkTokens positions (`sinks tokens(N)`).
//
// Positions only ever leave the window: a query at position q sees nothing
// below q - WindowLeft except sinks, and later queries sit at later
// positions. So once no query below position `from` will come (after a
// step, from = kv_len), the positions [SinkTokens, from - WindowLeft) are
// invisible to every current and future query, and a page whose positions
// all fall there may be reclaimed: left named in the table (it may then
// hold any bits, another sequence's data included) or replaced by -1.
type ReclaimRule struct {
	WindowLeft int `json:"window_left"`
	SinkTokens int `json:"sink_tokens"`
}

// ReclaimRuleOf is v's reclaim rule, or nil when v can see every cached
// position again (no window clause). Other clauses can only hide more
// (every clause must allow a position), so the tightest window bounds what
// any query sees whatever it is combined with (causal, expr, tree, custom);
// reclaiming what such a clause alone would hide (an expr's chunks, say)
// would need its analysis, and is not offered. Learned sinks carry no
// position and change nothing.
func ReclaimRuleOf(v *ir.Variant) *ReclaimRule {
	var r *ReclaimRule
	for _, c := range v.Masks {
		if c.Kind == ir.MaskWindow && (r == nil || c.Left < r.WindowLeft) {
			r = &ReclaimRule{WindowLeft: c.Left}
		}
	}
	if r != nil && v.Sinks != nil && v.Sinks.Kind == ir.SinkTokens {
		r.SinkTokens = v.Sinks.Tokens
	}
	return r
}

// ReclaimableRange is the range [lo, hi) of page indices (0-based, in the
// order of the sequence's table entries) of a sequence of v that no query
// at position from or later can see: every position of each such page is
// below from - window_left and not a sink token. from is the position of
// the earliest query still to come: kv_len after a step whose queries were
// answered; kv_len - q_len before attending the last q_len appended tokens;
// kv_len - k if the engine may still pop up to k tokens (popn) and append
// again. A child forked at position P sees what a query at P sees, so a
// page it shares stays needed until ReclaimableRange(v, P) covers it.
// Without a window (ReclaimRuleOf is nil) the range is empty.
func ReclaimableRange(v *ir.Variant, from int) (lo, hi int, err error) {
	if from < 0 {
		return 0, 0, fmt.Errorf("reclaim: position %d is negative", from)
	}
	r := ReclaimRuleOf(v)
	if r == nil {
		return 0, 0, nil
	}
	ps := v.PageSize
	lo = (r.SinkTokens + ps - 1) / ps // the first page holding no sink token
	hi = max(from-r.WindowLeft, 0) / ps
	if hi < lo {
		return 0, 0, nil
	}
	return lo, hi, nil
}

// ReclaimablePages lists the page indices of ReclaimableRange(v, from).
func ReclaimablePages(v *ir.Variant, from int) ([]int, error) {
	lo, hi, err := ReclaimableRange(v, from)
	if err != nil {
		return nil, err
	}
	var out []int
	for p := lo; p < hi; p++ {
		out = append(out, p)
	}
	return out, nil
}

// reclaimText is the reclaim rule in words, for the manifest and explain.
func reclaimText(v *ir.Variant) string {
	r := ReclaimRuleOf(v)
	if r == nil {
		return "none: without a window every cached position may be seen again"
	}
	keep := ""
	if r.SinkTokens > 0 {
		keep = fmt.Sprintf(" and ceil(%d / page_size) <= p (the first %d positions are sinks)", r.SinkTokens, r.SinkTokens)
	}
	return fmt.Sprintf("page p of a sequence (0-based table entry) with (p + 1) * page_size <= from - %d%s is never read again by a query at position from or later (from = kv_len after a step; lower it by what popn may remove); an engine may reuse such a page, named in the table or replaced by -1", r.WindowLeft, keep)
}
