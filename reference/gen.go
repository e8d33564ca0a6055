package reference

import (
	"fmt"
	"math"
	"math/rand"

	"github.com/attnc/attnc/ir"
)

// CaseSpec describes a random case for NewCase.
type CaseSpec struct {
	Name          string
	QLens, KVLens []int
	// SharePrefix makes sequences 1.. reuse sequence 0's leading pages (same
	// ids, so the same K/V) as far as both sequences fill them completely.
	SharePrefix bool
	// ExtraPages is the number of pool pages no sequence uses.
	ExtraPages int
	// NaNFill poisons every slot past kv_len in a last page and every unused
	// page with NaN (and some ±Inf).
	NaNFill bool
	// Scale is the data magnitude: values are uniform in [-Scale, Scale]
	// (default 1).
	Scale float32
	// NaNMasked also poisons, in the pages the sequences name, every
	// position that the mask hides from every query of the case (for every
	// qo head sharing its kv head): DESIGN §3 lets such positions hold any
	// bits, as an engine's reclaimed and reused window pages do.
	NaNMasked bool
	// HideBlock, when > 0, replaces page HideBlock of every sequence that
	// has more pages than that with -1 (a block-table entry or a CSR
	// kv_indices entry): its positions are hidden and its page is never read.
	HideBlock int
	// ParamDims sets named param dimensions; one left out is the longest
	// kv_len of the case (at least 1), so every position indexes inside.
	ParamDims map[string]int
}

// poison is the filler of slots no kernel may read: mostly NaN, some ±Inf.
func poison(i int) float32 {
	switch i % 7 {
	case 2:
		return float32(math.Inf(1))
	case 5:
		return float32(math.Inf(-1))
	}
	return float32(math.NaN())
}

// NewCase generates a random case for v: page ids are a random permutation of
// the pool, Q/K/V are uniform in [-Scale, Scale] rounded to v.DType, and
// learned sinks (when v has them) are uniform in [-2, 2]. A quantized
// cache holds random codes (values uniform in [-R, R] rounded to the code,
// R = CodeRange) and random scales near Scale / R, so that its real values
// are about uniform in [-Scale, Scale].
func NewCase(v *ir.Variant, rng *rand.Rand, spec CaseSpec) *Case {
	if len(spec.QLens) != len(spec.KVLens) {
		panic(fmt.Sprintf("reference: case %s: %d q lens, %d kv lens", spec.Name, len(spec.QLens), len(spec.KVLens)))
	}
	scale := spec.Scale
	if scale == 0 {
		scale = 1
	}
	ps := v.PageSize
	batch := len(spec.QLens)
	c := &Case{
		Name:   spec.Name,
		Batch:  batch,
		QLens:  append([]int(nil), spec.QLens...),
		KVLens: append([]int(nil), spec.KVLens...),
		Pages:  make([][]int, batch),
	}
	need := make([]int, batch)
	shared := make([]int, batch)
	distinct := spec.ExtraPages
	for b := range batch {
		if c.QLens[b] > c.KVLens[b] && !v.NonCausal() || c.QLens[b] < 0 {
			panic(fmt.Sprintf("reference: case %s: sequence %d has q_len %d > kv_len %d", spec.Name, b, c.QLens[b], c.KVLens[b]))
		}
		need[b] = (c.KVLens[b] + ps - 1) / ps
		if spec.SharePrefix && b > 0 {
			shared[b] = min(c.KVLens[0]/ps, c.KVLens[b]/ps)
		}
		distinct += need[b] - shared[b]
	}
	c.NumPages = distinct
	perm := rng.Perm(distinct)
	next := 0
	used := make([]bool, distinct)
	for b := range batch {
		c.Pages[b] = make([]int, need[b])
		for j := range need[b] {
			if j < shared[b] {
				c.Pages[b][j] = c.Pages[0][j]
			} else {
				c.Pages[b][j] = perm[next]
				next++
			}
			used[c.Pages[b][j]] = true
		}
	}

	uniform := func(n int) []float32 {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = Round(v.DType, (2*rng.Float32()-1)*scale)
		}
		return xs
	}
	c.Q = uniform(c.TotalQ() * v.QOHeads * v.HeadDimQK)
	slots := c.NumPages * v.KVHeads * ps
	if v.Quantized() {
		r := CodeRange(v.KVDType)
		codes := func(n int) []float32 {
			xs := make([]float32, n)
			for i := range xs {
				xs[i] = Round(v.KVDType, (2*rng.Float32()-1)*r)
			}
			return xs
		}
		c.KPages = codes(slots * v.HeadDimQK)
		c.VPages = codes(slots * v.HeadDimV)
		c.KScale = make([]float32, v.ScaleLen())
		c.VScale = make([]float32, v.ScaleLen())
		for i := range c.KScale {
			c.KScale[i] = scale / r * (0.75 + rng.Float32()/2)
			c.VScale[i] = scale / r * (0.75 + rng.Float32()/2)
		}
	} else {
		c.KPages = uniform(slots * v.HeadDimQK)
		c.VPages = uniform(slots * v.HeadDimV)
	}
	if v.MLA != nil {
		// MLA's value row is the compressed KV: the key row's first
		// kv_lora_rank elements.
		for p := range c.NumPages {
			for slot := range ps {
				for d := range v.HeadDimV {
					c.VPages[PageIndex(v, p, 0, slot, d, v.HeadDimV)] = c.KPages[PageIndex(v, p, 0, slot, d, v.HeadDimQK)]
				}
			}
		}
	}
	if learned(v) {
		c.Sinks = make([]float32, v.QOHeads)
		for h := range c.Sinks {
			c.Sinks[h] = 4*rng.Float32() - 2
		}
	}
	if v.InlineRope() != nil {
		// Large offsets exercise the angle's precision far from position 0.
		c.KRopeOffset = make([]int32, batch)
		for b := range batch {
			c.KRopeOffset[b] = int32(rng.Intn(ropeOffsetRange(v.Rope)))
			for i := range c.QLens[b] {
				qPos := c.KVLens[b] - c.QLens[b] + i
				c.QRopePos = append(c.QRopePos, int32(qPos)+c.KRopeOffset[b]-int32(rng.Intn(2)))
			}
		}
	}
	for _, m := range v.Masks {
		switch m.Kind {
		case ir.MaskTree:
			c.TreeIndptr = c.QOIndptr()
			for _, n := range c.QLens {
				c.TreeOrder = append(c.TreeOrder, randomTree(rng, n)...)
			}
		case ir.MaskCustom:
			c.MaskIndptr = []int32{0}
			for b := range batch {
				bits := c.QLens[b] * c.KVLens[b]
				for k := range (bits+7)/8 + 1 { // one spare byte: offsets need not be packed
					var x byte
					for bit := range 8 {
						if rng.Float32() < 0.7 && k*8+bit < bits {
							x |= 1 << bit
						}
					}
					c.CustomMask = append(c.CustomMask, x)
				}
				c.MaskIndptr = append(c.MaskIndptr, int32(len(c.CustomMask)))
			}
		}
	}
	c.randomParams(v, rng, spec)
	if v.InlineRope() != nil && c.TreeOrder != nil {
		// A draft tree's tokens sit at depth-based positions (EAGLE,
		// Medusa): prefix length + depth, so siblings share a position.
		row := 0
		for b := range batch {
			base := c.KVLens[b] - c.QLens[b]
			for i := range c.QLens[b] {
				c.QRopePos[row+i] = int32(base+treeDepth(c.TreeOrder[2*row:2*(row+c.QLens[b])], i)) + c.KRopeOffset[b]
			}
			row += c.QLens[b]
		}
	}
	if v.Rope != nil {
		ropeArgs(v, rng, c)
	}
	if spec.HideBlock > 0 {
		for _, pages := range c.Pages {
			if len(pages) > spec.HideBlock+1 {
				pages[spec.HideBlock] = -1
			}
		}
		for p := range used {
			used[p] = false
		}
		for _, pages := range c.Pages {
			for _, p := range pages {
				if p >= 0 {
					used[p] = true
				}
			}
		}
	}
	if spec.NaNMasked {
		c.poisonMasked(v)
	}
	if spec.NaNFill {
		fill := func(page, from int) {
			for h := range v.KVHeads {
				for s := from; s < ps; s++ {
					for d := range v.HeadDimQK {
						i := PageIndex(v, page, h, s, d, v.HeadDimQK)
						c.KPages[i] = poison(i)
					}
					for d := range v.HeadDimV {
						i := PageIndex(v, page, h, s, d, v.HeadDimV)
						c.VPages[i] = poison(i + 3)
					}
				}
			}
		}
		for p, u := range used {
			if !u {
				fill(p, 0)
			}
		}
		for b, pages := range c.Pages {
			if n := len(pages); n > 0 {
				fill(pages[n-1], c.KVLens[b]-(n-1)*ps)
			}
		}
	}
	return c
}

// CodeRange is the magnitude random codes of 8-bit dtype dt are drawn up
// to: most of the format's range (e4m3 448, e5m2 57344, int8 127) without
// saturating.
func CodeRange(dt ir.DType) float32 {
	switch dt {
	case ir.DTE4M3:
		return 400
	case ir.DTE5M2:
		return 49152
	}
	return 127
}

// treeDepth is the number of proper ancestors of token i in a segment's
// DFS intervals (left, right) pairs.
func treeDepth(order []int32, i int) int {
	n := 0
	for j := 0; 2*j < len(order); j++ {
		if j != i && order[2*j] <= order[2*i] && order[2*i] < order[2*j+1] {
			n++
		}
	}
	return n
}

// randomTree draws a tree over n tokens in topological order (token k's
// parent is a random earlier token; token 0 is the root) and returns each
// token's DFS interval (TreeIntervals).
func randomTree(rng *rand.Rand, n int) []int32 {
	parent := make([]int, n)
	for k := range parent {
		parent[k] = -1
		if k > 0 {
			parent[k] = rng.Intn(k)
		}
	}
	return TreeIntervals(parent)
}

// TreeIntervals is tree_order's rows for a forest given by each token's
// parent (-1: a root; a parent comes before its children): each token's
// DFS interval (left, right), roots and children visited in token order,
// so that j is an ancestor-or-self of i iff left_j <= left_i < right_j.
func TreeIntervals(parent []int) []int32 {
	children := make([][]int, len(parent))
	var roots []int
	for k, p := range parent {
		if p < 0 {
			roots = append(roots, k)
		} else {
			children[p] = append(children[p], k)
		}
	}
	out := make([]int32, 2*len(parent))
	next := int32(0)
	var dfs func(int)
	dfs = func(x int) {
		out[2*x] = next
		next++
		for _, ch := range children[x] {
			dfs(ch)
		}
		out[2*x+1] = next
	}
	for _, r := range roots {
		dfs(r)
	}
	return out
}

// poisonMasked fills with poison every K/V row (page, kv head, slot) inside
// some sequence's kv_len that no query of the case sees through any qo head
// of that kv head. Shared pages count as seen when any sequence sees them.
func (c *Case) poisonMasked(v *ir.Variant) {
	ps, group := v.PageSize, v.GroupSize()
	row := func(page, kvh, slot int) int { return (page*v.KVHeads+kvh)*ps + slot }
	seen := make([]bool, c.NumPages*v.KVHeads*ps)
	for b := range c.Batch {
		qLen, kvLen := c.QLens[b], c.KVLens[b]
		for i := range qLen {
			qPos := kvLen - qLen + i
			for h := range v.QOHeads {
				for kv := range kvLen {
					page := c.Pages[b][kv/ps]
					if page >= 0 && visible(v, c, b, h, i, qPos, kv) {
						seen[row(page, h/group, kv%ps)] = true
					}
				}
			}
		}
	}
	for b, pages := range c.Pages {
		for kv := range c.KVLens[b] {
			page := pages[kv/ps]
			if page < 0 {
				continue
			}
			for kvh := range v.KVHeads {
				if seen[row(page, kvh, kv%ps)] {
					continue
				}
				for d := range v.HeadDimQK {
					i := PageIndex(v, page, kvh, kv%ps, d, v.HeadDimQK)
					c.KPages[i] = poison(i)
				}
				for d := range v.HeadDimV {
					i := PageIndex(v, page, kvh, kv%ps, d, v.HeadDimV)
					c.VPages[i] = poison(i + 3)
				}
			}
		}
	}
}

// randomParams fills the case's param tensors. Each row (the last
// dimension) of an i32 param is a packed-document id sequence: it starts
// at 0 and grows by one at random boundaries (about every 6 elements), so
// an equality of two entries holds for runs of positions and fails across
// them; f32 params are uniform in [-0.5, 0.5).
func (c *Case) randomParams(v *ir.Variant, rng *rand.Rand, spec CaseSpec) {
	if len(v.Params) == 0 {
		return
	}
	longest := 1
	for _, n := range c.KVLens {
		longest = max(longest, n)
	}
	c.ParamDims = map[string]int{}
	for _, n := range v.ParamDimNames() {
		c.ParamDims[n] = longest
		if d, ok := spec.ParamDims[n]; ok {
			c.ParamDims[n] = d
		}
	}
	c.Params = map[string][]float64{}
	for _, p := range v.Params {
		dims := c.ParamShape(v, p)
		n := int64(1)
		for _, d := range dims {
			n *= max(d, 0)
		}
		row := max(dims[len(dims)-1], 1)
		xs := make([]float64, n)
		id := 0.0
		for i := range xs {
			if p.T == ir.I32 {
				if int64(i)%row == 0 {
					id = 0
				} else if rng.Intn(6) == 0 {
					id++
				}
				xs[i] = id
			} else {
				xs[i] = float64(rng.Float32() - 0.5)
			}
		}
		c.Params[p.Name] = xs
	}
}

// ropeOffsetRange bounds the random k_rope_pos_offset: large offsets
// exercise the angle's precision far from position 0; a table source
// keeps its rows (and so the table) small.
func ropeOffsetRange(r *ir.Rope) int {
	if r.Style == ir.RopeTable {
		return 2000
	}
	return 200000
}

// ropeArgs draws the angles' runtime arguments (RandomRopeSource), a
// table covering every position the case rotates.
func ropeArgs(v *ir.Variant, rng *rand.Rand, c *Case) {
	top := int32(-1)
	if v.Rope.Style == ir.RopeTable {
		for _, p := range c.QRopePos {
			top = max(top, p)
		}
		for b := range c.Batch {
			if c.KVLens[b] > 0 {
				top = max(top, c.KRopeOffset[b]+int32(c.KVLens[b])-1)
			}
		}
	}
	c.RopeSource = RandomRopeSource(v, rng, top)
}
