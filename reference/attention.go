package reference

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/ir"
)

// Case is one test input: a batch of ragged query segments over a paged KV
// cache. Data is already rounded to the storage dtype and kept as float32.
type Case struct {
	Name   string
	Batch  int
	QLens  []int // per sequence
	KVLens []int // per sequence
	// Pages lists, per sequence, its page ids in order; len(Pages[b]) is
	// ceil(KVLens[b]/page_size). Sequences may share page ids.
	Pages    [][]int
	NumPages int
	// Q is [total_q, qo_heads, d_qk].
	Q []float32
	// KPages and VPages are [num_pages, kv_heads, page_size, d] (HND) or
	// [num_pages, page_size, kv_heads, d] (NHD). For a quantized cache
	// they hold the codes' values (CodeValue), which KScale and VScale
	// scale.
	KPages, VPages []float32
	// KScale and VScale are a quantized cache's scales, [1] (per_tensor)
	// or [kv_heads] (per_head): a cached element's real value is code
	// value * scale. MLA's latent cache uses KScale for keys and values.
	KScale, VScale []float32
	// Sinks holds learned sink logits, [qo_heads], for `sinks learned`.
	Sinks []float32
	// TreeOrder [total_q, 2] holds each query token's DFS interval (left,
	// right) and TreeIndptr [batch+1] each sequence's first row, for `mask
	// tree`.
	TreeOrder, TreeIndptr []int32
	// CustomMask holds, from byte MaskIndptr[b], sequence b's row-major
	// q_len x kv_len bits (little-endian bit order), for `mask custom`.
	CustomMask []byte
	MaskIndptr []int32
	// QRopePos [total_q] and KRopeOffset [batch] are the inline RoPE
	// positions: q at QRopePos[t], k at kv_pos + KRopeOffset[b].
	QRopePos, KRopeOffset []int32
	// RopeSource holds the angles' runtime arguments of a table or
	// factors rope.
	RopeSource
	// KVTokenIndptr [batch+1], when not nil, makes the case ragged
	// (prefill_ragged): sequence b's K/V rows are RaggedK and RaggedV rows
	// KVTokenIndptr[b] .. KVTokenIndptr[b+1], each [kv_heads, d], real
	// values in the variant's dtype (no scales), and the pages (which may
	// then be absent) are not read.
	KVTokenIndptr    []int32
	RaggedK, RaggedV []float32
	// Params holds each param tensor's row-major values (i32 params hold
	// integers), ParamDims the value of each named param dimension.
	Params    map[string][]float64
	ParamDims map[string]int
	// ParamAt, for a param in it, gives the value at a flat index in
	// place of Params (ParamValue.At).
	ParamAt map[string]func(flat int64) float64
}

// ParamShape is param p's shape in case c.
func (c *Case) ParamShape(v *ir.Variant, p *ir.ParamDecl) []int64 {
	dims := make([]int64, len(p.Dims))
	for k, d := range p.Dims {
		switch d.Name {
		case "":
			dims[k] = int64(d.Size)
		case "qo_heads":
			dims[k] = int64(v.QOHeads)
		case "kv_heads":
			dims[k] = int64(v.KVHeads)
		case "batch":
			dims[k] = int64(c.Batch)
		default:
			dims[k] = int64(c.ParamDims[d.Name])
		}
	}
	return dims
}

// paramEnv is the case's param tensors for expression evaluation.
func (c *Case) paramEnv(v *ir.Variant) map[string]*ParamValue {
	if c == nil || len(v.Params) == 0 {
		return nil
	}
	out := map[string]*ParamValue{}
	for _, p := range v.Params {
		out[p.Name] = &ParamValue{Dims: c.ParamShape(v, p), Data: c.Params[p.Name], At: c.ParamAt[p.Name]}
	}
	return out
}

// Ragged is c with its K/V rows gathered from the pages into contiguous
// rows ragged by kv_token_indptr (real values, code value * scale for a
// quantized cache, rounded to the variant's dtype), after lead rows of
// poison that no sequence names (kv_token_indptr[0] = lead). Attention
// of the result reads the ragged rows: positions, masks and RoPE are c's.
// It panics when a page of c is hidden (-1): ragged rows hide nothing.
func Ragged(v *ir.Variant, c *Case, lead int) *Case {
	return gather(v, c, lead, make([]int, c.Batch))
}

// gather is Ragged of positions from[b] .. kv_len-1 of each sequence b.
func gather(v *ir.Variant, c *Case, lead int, from []int) *Case {
	check(v, c)
	r := *c
	r.KVTokenIndptr = make([]int32, c.Batch+1)
	r.KVTokenIndptr[0] = int32(lead)
	kvh, dqk, dv := v.KVHeads, v.HeadDimQK, v.HeadDimV
	r.RaggedK = make([]float32, lead*kvh*dqk)
	r.RaggedV = make([]float32, lead*kvh*dv)
	for i := range r.RaggedK {
		r.RaggedK[i] = poison(i)
	}
	for i := range r.RaggedV {
		r.RaggedV[i] = poison(i + 3)
	}
	for b := range c.Batch {
		r.KVTokenIndptr[b+1] = r.KVTokenIndptr[b] + int32(c.KVLens[b]-from[b])
		for kv := from[b]; kv < c.KVLens[b]; kv++ {
			page, slot := c.Pages[b][kv/v.PageSize], kv%v.PageSize
			if page < 0 {
				panic(fmt.Sprintf("reference: case %s: ragged rows of a hidden page", c.Name))
			}
			for h := range kvh {
				ks, vs := c.scales(v, h)
				for d := range dqk {
					r.RaggedK = append(r.RaggedK, Round(v.DType, float32(float64(c.KPages[PageIndex(v, page, h, slot, d, dqk)])*ks)))
				}
				for d := range dv {
					r.RaggedV = append(r.RaggedV, Round(v.DType, float32(float64(c.VPages[PageIndex(v, page, h, slot, d, dv)])*vs)))
				}
			}
		}
	}
	return &r
}

// SplitChunk splits case c — each sequence's q_len new tokens (a prefill
// chunk) over its kv_len cached ones — at prefix lengths prefix[b] <=
// kv_len - q_len into TVM's chunked prefill: pre, the same queries over
// positions 0 .. prefix[b]-1 in the same pages (for a `mask none`
// variant), and chunk, the queries over positions prefix[b] .. kv_len-1
// as ragged rows after lead poisoned ones (prefill_ragged): there kv_len
// is kv_len - prefix[b] and every position shifts down by prefix[b], so
// a causal mask sees the same keys, and k_rope_pos_offset grows by
// prefix[b] so that every key rotates as before. Merging the two states
// (merge_state) gives c's causal attention. c must have no data mask
// (tree, custom), no sinks and no hidden page.
func SplitChunk(v *ir.Variant, c *Case, prefix []int, lead int) (pre, chunk *Case) {
	if hasMask(v, ir.MaskTree) || hasMask(v, ir.MaskCustom) || v.Sinks != nil {
		panic("reference: SplitChunk of a variant with a data mask or sinks")
	}
	p := *c
	p.KVLens = make([]int, c.Batch)
	p.Pages = make([][]int, c.Batch)
	for b := range c.Batch {
		if prefix[b] < 0 || prefix[b] > c.KVLens[b]-c.QLens[b] {
			panic(fmt.Sprintf("reference: case %s: prefix %d of sequence %d is not below its queries", c.Name, prefix[b], b))
		}
		p.KVLens[b] = prefix[b]
		p.Pages[b] = c.Pages[b][:(prefix[b]+v.PageSize-1)/v.PageSize]
	}
	chunk = gather(v, c, lead, prefix)
	chunk.KVLens = make([]int, c.Batch)
	chunk.Pages = make([][]int, c.Batch)
	if c.KRopeOffset != nil {
		chunk.KRopeOffset = make([]int32, c.Batch)
	}
	for b := range c.Batch {
		chunk.KVLens[b] = c.KVLens[b] - prefix[b]
		chunk.Pages[b] = make([]int, (chunk.KVLens[b]+v.PageSize-1)/v.PageSize) // unread: the rows are ragged
		if c.KRopeOffset != nil {
			chunk.KRopeOffset[b] = c.KRopeOffset[b] + int32(prefix[b])
		}
	}
	return &p, chunk
}

// kvRow is the element offset of dimension 0 of kv head kh's row at
// position kv of sequence b in the K (d = HeadDimQK) or V (d = HeadDimV)
// data, and that data: the pages, or the ragged rows. hidden is true for a
// position of a page the table hides.
func (c *Case) kvRow(v *ir.Variant, b, kv, kh, d int, isK bool) (data []float32, at int, hidden bool) {
	if c.KVTokenIndptr != nil {
		row := int(c.KVTokenIndptr[b]) + kv
		if isK {
			return c.RaggedK, (row*v.KVHeads + kh) * d, false
		}
		return c.RaggedV, (row*v.KVHeads + kh) * d, false
	}
	page, slot := c.Pages[b][kv/v.PageSize], kv%v.PageSize
	if page < 0 {
		return nil, 0, true
	}
	if isK {
		return c.KPages, PageIndex(v, page, kh, slot, 0, d), false
	}
	return c.VPages, PageIndex(v, page, kh, slot, 0, d), false
}

// TotalQ is the number of query tokens over all sequences.
func (c *Case) TotalQ() int {
	n := 0
	for _, q := range c.QLens {
		n += q
	}
	return n
}

// QOIndptr is the query segment offsets, [batch+1].
func (c *Case) QOIndptr() []int32 {
	p := make([]int32, c.Batch+1)
	for b, q := range c.QLens {
		p[b+1] = p[b] + int32(q)
	}
	return p
}

// CSR is the FlashInfer page table: kv_indptr [batch+1], kv_indices [nnz] and
// kv_last_page_len [batch] (0 for a sequence without pages).
func (c *Case) CSR(pageSize int) (indptr, indices, lastLen []int32) {
	indptr = make([]int32, c.Batch+1)
	lastLen = make([]int32, c.Batch)
	for b, pages := range c.Pages {
		indptr[b+1] = indptr[b] + int32(len(pages))
		for _, p := range pages {
			indices = append(indices, int32(p))
		}
		if n := len(pages); n > 0 {
			lastLen[b] = int32(c.KVLens[b] - (n-1)*pageSize)
		}
	}
	return indptr, indices, lastLen
}

// BlockTable is the vLLM page table: table [batch, maxBlocks] (entries past a
// sequence's pages are -1), maxBlocks (at least 1) and kv_lens [batch].
func (c *Case) BlockTable() (table []int32, maxBlocks int, kvLens []int32) {
	maxBlocks = 1
	for _, p := range c.Pages {
		maxBlocks = max(maxBlocks, len(p))
	}
	table = make([]int32, c.Batch*maxBlocks)
	kvLens = make([]int32, c.Batch)
	for b, pages := range c.Pages {
		for j := range maxBlocks {
			table[b*maxBlocks+j] = -1
			if j < len(pages) {
				table[b*maxBlocks+j] = int32(pages[j])
			}
		}
		kvLens[b] = int32(c.KVLens[b])
	}
	return table, maxBlocks, kvLens
}

// PageIndex is the element offset of dimension dim of kv head h at slot
// `slot` of page `page` in a K (d = HeadDimQK) or V (d = HeadDimV) pool.
func PageIndex(v *ir.Variant, page, h, slot, dim, d int) int {
	if v.Layout == ir.NHD {
		return ((page*v.PageSize+slot)*v.KVHeads+h)*d + dim
	}
	return ((page*v.KVHeads+h)*v.PageSize+slot)*d + dim
}

// check panics when c does not fit v.
func check(v *ir.Variant, c *Case) {
	if len(c.QLens) != c.Batch || len(c.KVLens) != c.Batch || len(c.Pages) != c.Batch {
		panic(fmt.Sprintf("reference: case %s: batch %d with %d q lens, %d kv lens, %d page lists", c.Name, c.Batch, len(c.QLens), len(c.KVLens), len(c.Pages)))
	}
	for b := range c.Batch {
		if c.QLens[b] > c.KVLens[b] && !v.NonCausal() || c.QLens[b] < 0 {
			panic(fmt.Sprintf("reference: case %s: sequence %d has q_len %d > kv_len %d", c.Name, b, c.QLens[b], c.KVLens[b]))
		}
		if c.KVTokenIndptr != nil {
			continue // ragged rows: the pages are not read
		}
		if want := (c.KVLens[b] + v.PageSize - 1) / v.PageSize; len(c.Pages[b]) != want {
			panic(fmt.Sprintf("reference: case %s: sequence %d has %d pages, want %d", c.Name, b, len(c.Pages[b]), want))
		}
		for _, p := range c.Pages[b] {
			if p == -1 {
				continue // a hidden page (block table or CSR)
			}
			if p < 0 || p >= c.NumPages {
				panic(fmt.Sprintf("reference: case %s: page id %d out of range [0, %d)", c.Name, p, c.NumPages))
			}
		}
	}
	if len(c.Q) != c.TotalQ()*v.QOHeads*v.HeadDimQK {
		panic(fmt.Sprintf("reference: case %s: len(Q) = %d, want %d", c.Name, len(c.Q), c.TotalQ()*v.QOHeads*v.HeadDimQK))
	}
	pool := c.NumPages * v.KVHeads * v.PageSize
	if c.KVTokenIndptr == nil && (len(c.KPages) != pool*v.HeadDimQK || len(c.VPages) != pool*v.HeadDimV) {
		panic(fmt.Sprintf("reference: case %s: K/V pools have %d/%d elements, want %d/%d", c.Name, len(c.KPages), len(c.VPages), pool*v.HeadDimQK, pool*v.HeadDimV))
	}
	if v.Quantized() && (len(c.KScale) != v.ScaleLen() || len(c.VScale) != v.ScaleLen()) {
		panic(fmt.Sprintf("reference: case %s: %d/%d kv scales, want %d", c.Name, len(c.KScale), len(c.VScale), v.ScaleLen()))
	}
	if ip := c.KVTokenIndptr; ip != nil {
		if len(ip) != c.Batch+1 {
			panic(fmt.Sprintf("reference: case %s: %d kv_token_indptr entries, want %d", c.Name, len(ip), c.Batch+1))
		}
		for b := range c.Batch {
			if int(ip[b+1]-ip[b]) != c.KVLens[b] {
				panic(fmt.Sprintf("reference: case %s: sequence %d has %d ragged rows, kv_len %d", c.Name, b, ip[b+1]-ip[b], c.KVLens[b]))
			}
		}
		if rows := int(ip[c.Batch]) * v.KVHeads; len(c.RaggedK) < rows*v.HeadDimQK || len(c.RaggedV) < rows*v.HeadDimV {
			panic(fmt.Sprintf("reference: case %s: ragged K/V have %d/%d elements, want at least %d/%d", c.Name, len(c.RaggedK), len(c.RaggedV), rows*v.HeadDimQK, rows*v.HeadDimV))
		}
	}
	if learned(v) && len(c.Sinks) != v.QOHeads {
		panic(fmt.Sprintf("reference: case %s: %d learned sinks, want %d", c.Name, len(c.Sinks), v.QOHeads))
	}
}

func learned(v *ir.Variant) bool { return v.Sinks != nil && v.Sinks.Kind == ir.SinkLearned }

// Visible reports whether kv position kv is visible to the query at q for qo
// head h of sequence b: every mask clause must allow it, then `sinks
// tokens(N)` makes kv < N visible again (still causal). Without a case,
// every param reads 0 (an empty tensor).
func Visible(v *ir.Variant, b, h, q, kv int) bool { return visible(v, nil, b, h, 0, q, kv) }

// VisibleIn is Visible with the param tensors of c (Params, ParamDims and
// Batch): a mask that reads a param reads c's values.
func VisibleIn(v *ir.Variant, c *Case, b, h, q, kv int) bool { return visible(v, c, b, h, 0, q, kv) }

// VisibleRow is VisibleIn for query token i of sequence b's segment (its
// row in the tree and custom masks), at position q.
func VisibleRow(v *ir.Variant, c *Case, b, h, i, q, kv int) bool {
	return visible(v, c, b, h, i, q, kv)
}

// visible is Visible with the case's tree and custom masks: i is the query
// token's index in its segment.
func visible(v *ir.Variant, c *Case, b, h, i, q, kv int) bool {
	ok := true
	for _, m := range v.Masks {
		switch m.Kind {
		case ir.MaskTree:
			if c == nil || c.TreeOrder == nil {
				panic("reference: mask tree needs the case's tree_order")
			}
			base := c.KVLens[b] - c.QLens[b]
			if kv >= base {
				row := func(x int) []int32 { return c.TreeOrder[2*(int(c.TreeIndptr[b])+x):][:2] }
				me, other := row(i), row(kv-base)
				ok = other[0] <= me[0] && me[0] < other[1]
			}
		case ir.MaskCustom:
			if c == nil || c.CustomMask == nil {
				panic("reference: mask custom needs the case's custom_mask")
			}
			bit := i*c.KVLens[b] + kv
			ok = c.CustomMask[int(c.MaskIndptr[b])+bit/8]>>(bit%8)&1 == 1
		case ir.MaskCausal:
			ok = kv <= q
		case ir.MaskNone:
		case ir.MaskWindow:
			ok = kv <= q && q-kv <= m.Left
		case ir.MaskExpr:
			ok = EvalBool(m.Expr, &Env{QPos: int64(q), KVPos: int64(kv), Head: int64(h), Batch: int64(b), QOHeads: v.QOHeads, Params: c.paramEnv(v)})
		default:
			panic(fmt.Sprintf("reference: mask %s not supported by reference", m.Kind))
		}
		if !ok {
			break
		}
	}
	if !ok && v.Sinks != nil && v.Sinks.Kind == ir.SinkTokens {
		ok = kv < v.Sinks.Tokens && kv <= q
	}
	return ok
}

// keyRopePos is the rotation position of cache position kv of sequence b,
// whose first query row is row: with `mask tree` the tree's own tokens (the
// last q_len positions) rotate at their queries' q_rope_position (their
// depth-based positions); every other key at kv + k_rope_pos_offset[b].
func keyRopePos(v *ir.Variant, c *Case, b, row, kv int) int {
	if base := c.KVLens[b] - c.QLens[b]; hasMask(v, ir.MaskTree) && kv >= base {
		return int(c.QRopePos[row+kv-base])
	}
	return kv + int(c.KRopeOffset[b])
}

func hasMask(v *ir.Variant, k ir.MaskKind) bool {
	for _, m := range v.Masks {
		if m.Kind == k {
			return true
		}
	}
	return false
}

// Attention computes, in float64, o [total_q, qo_heads, d_v] and the
// log-sum-exp lse [total_q, qo_heads] of the scaled (and transformed) scores
// in the variant's lse base, learned sink (a logit in the scores' units)
// included. A row with nothing visible gives o = 0 and lse = -Inf. It
// panics on inputs that do not fit v.
func Attention(v *ir.Variant, c *Case) (o []float64, lse []float64) {
	o, lse, _ = AttentionMag(v, c)
	return o, lse
}

// AttentionMag is Attention that also returns, for every element of o, the
// magnitude its sum is made of: mag = sum_j w_j |v_j| / sum_j w_j with the
// softmax weights w_j (a learned sink in the denominator), the scale of the
// f32 rounding error a kernel may make before its one rounding to the
// storage type (see CompareULP).
func AttentionMag(v *ir.Variant, c *Case) (o, lse, mag []float64) {
	check(v, c)
	qo, dqk, dv, group := v.QOHeads, v.HeadDimQK, v.HeadDimV, v.GroupSize()
	totalQ := c.TotalQ()
	o = make([]float64, totalQ*qo*dv)
	mag = make([]float64, totalQ*qo*dv)
	lse = make([]float64, totalQ*qo)
	row := 0
	params := c.paramEnv(v)
	for b := range c.Batch {
		qLen, kvLen := c.QLens[b], c.KVLens[b]
		// keys[kv*KVHeads+kh] is K row kv of kv head kh as the scores
		// read it (dequantized, rotated), made at its first read: every
		// query and head of the group reads the same row.
		keys := make([][]float64, kvLen*v.KVHeads)
		for i := range qLen {
			qPos := kvLen - qLen + i
			for h := range qo {
				kh := h / group
				ks, vs := c.scales(v, kh)
				q := make([]float64, dqk)
				for d, x := range c.Q[((row+i)*qo+h)*dqk:][:dqk] {
					q[d] = float64(x)
				}
				if v.InlineRope() != nil {
					q = rotate(v.Rope, &c.RopeSource, q, int(c.QRopePos[row+i]))
				}
				var pos []int
				var s []float64
				for kv := range kvLen {
					kd, at, hidden := c.kvRow(v, b, kv, kh, dqk, true)
					if !visible(v, c, b, h, i, qPos, kv) || hidden { // -1: the table hides the page
						continue
					}
					k := keys[kv*v.KVHeads+kh]
					if k == nil {
						k = make([]float64, dqk)
						for d := range dqk {
							k[d] = float64(kd[at+d]) * ks
						}
						if v.InlineRope() != nil {
							k = rotate(v.Rope, &c.RopeSource, k, keyRopePos(v, c, b, row, kv))
						}
						keys[kv*v.KVHeads+kh] = k
					}
					dot := 0.0
					for d := range dqk {
						dot += q[d] * k[d]
					}
					x := v.Scale * dot
					if v.Score != nil {
						x = EvalFloat(v.Score, &Env{Score: x, QPos: int64(qPos), KVPos: int64(kv), Head: int64(h), Batch: int64(b), QOHeads: qo, Params: params})
					}
					if math.IsInf(x, -1) {
						// A -inf score hides its position like the mask:
						// its V row is never read (DESIGN §3).
						continue
					}
					pos = append(pos, kv)
					s = append(s, x)
				}
				// A NaN or +inf score makes m NaN or +inf and, through
				// exp(s - m), the row's o and lse NaN (DESIGN §3).
				m := math.Inf(-1)
				for _, x := range s {
					m = NaNMax(m, x)
				}
				if learned(v) {
					m = NaNMax(m, float64(c.Sinks[h]))
				}
				out := o[((row+i)*qo+h)*dv:][:dv]
				outMag := mag[((row+i)*qo+h)*dv:][:dv]
				if math.IsInf(m, -1) {
					lse[(row+i)*qo+h] = m
					continue
				}
				sum := 0.0
				if learned(v) {
					sum = math.Exp(float64(c.Sinks[h]) - m)
				}
				for j, kv := range pos {
					w := math.Exp(s[j] - m)
					sum += w
					vd, at, _ := c.kvRow(v, b, kv, kh, dv, false)
					for d := range dv {
						x := float64(vd[at+d]) * vs
						out[d] += w * x
						outMag[d] += w * math.Abs(x)
					}
				}
				for d := range out {
					out[d] /= sum
					outMag[d] /= sum
				}
				lse[(row+i)*qo+h] = inBase(v.LSEBase, m+math.Log(sum))
			}
		}
		row += qLen
	}
	return o, lse, mag
}

// NaNMax is the kernels' float max (ir.Max): NaN when either operand is
// NaN, else the larger. (math.Max prefers +Inf to NaN.)
func NaNMax(x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	return math.Max(x, y)
}

// NaNMin is the kernels' float min (ir.Min): NaN when either operand is
// NaN, else the smaller.
func NaNMin(x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	return math.Min(x, y)
}

// scales are kv head kh's key and value scales in float64: 1 for a plain
// cache and for ragged rows; MLA's values are its latent cache, scaled by KScale. A code value
// times a scale is exact in float64 (at most 8 + 24 significant bits).
func (c *Case) scales(v *ir.Variant, kh int) (ks, vs float64) {
	if !v.Quantized() || c.KVTokenIndptr != nil {
		return 1, 1
	}
	i := 0
	if v.KVScale == ir.KVScalePerHead {
		i = kh
	}
	ks, vs = float64(c.KScale[i]), float64(c.VScale[i])
	if v.MLA != nil {
		vs = ks
	}
	return ks, vs
}

// inBase converts a natural-log lse to base b.
func inBase(b ir.LSEBase, lse float64) float64 {
	if b == ir.LSEBase2 {
		return lse / math.Ln2
	}
	return lse
}

// MergeState merges two partial attention states over disjoint key sets:
// va, vb are [rows, d] and sa, sb their natural log-sum-exps [rows]. Each v
// is weighted by exp(s - max); -Inf is an empty state (when both sides are
// -Inf the row is v = 0, s = -Inf); a NaN or +Inf s on either side gives
// NaN in the row's v and s.
func MergeState(va, sa, vb, sb []float64) (v, s []float64) {
	v, s, _ = MergeStateMag(ir.LSEBaseE, va, sa, vb, sb)
	return v, s
}

// MergeStateMag is MergeState for states whose lse are in base b (each v
// is weighted by b^(s - max) and s = max + log_b(sum of weights)) that
// also returns, for every element of v, the magnitude its weighted mean is
// made of, (wa|va| + wb|vb|) / (wa + wb) (see AttentionMag).
func MergeStateMag(b ir.LSEBase, va, sa, vb, sb []float64) (v, s, mag []float64) {
	pow, logOf := math.Exp, math.Log
	if b == ir.LSEBase2 {
		pow, logOf = math.Exp2, math.Log2
	}
	if len(sa) != len(sb) || len(va) != len(vb) || len(sa) == 0 && len(va) != 0 || len(sa) != 0 && len(va)%len(sa) != 0 {
		panic(fmt.Sprintf("reference: MergeState of v %d/%d, s %d/%d", len(va), len(vb), len(sa), len(sb)))
	}
	v = make([]float64, len(va))
	mag = make([]float64, len(va))
	s = make([]float64, len(sa))
	if len(sa) == 0 {
		return v, s, mag
	}
	d := len(va) / len(sa)
	for r := range sa {
		if bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 1) }; bad(sa[r]) || bad(sb[r]) {
			s[r] = math.NaN()
			for k := r * d; k < (r+1)*d; k++ {
				v[k] = math.NaN()
			}
			continue
		}
		m := math.Max(sa[r], sb[r])
		if math.IsInf(m, -1) {
			s[r] = m
			continue
		}
		wa, wb := pow(sa[r]-m), pow(sb[r]-m)
		for k := r * d; k < (r+1)*d; k++ {
			if wa != 0 {
				v[k] += wa * va[k]
				mag[k] += wa * math.Abs(va[k])
			}
			if wb != 0 {
				v[k] += wb * vb[k]
				mag[k] += wb * math.Abs(vb[k])
			}
			v[k] /= wa + wb
			mag[k] /= wa + wb
		}
		s[r] = m + logOf(wa+wb)
	}
	return v, s, mag
}

// Compare checks got against want element-wise with error
// |got - want| / max(1, |want|) (absolute near zero, relative for large
// values). NaN in got always fails, and an infinite want (the lse of an empty
// row) must be matched exactly. It returns the largest error, its index (the
// first failing one when errors are infinite; -1 on a length mismatch) and
// whether every error is within tol.
func Compare(got []float32, want []float64, tol float64) (maxErr float64, idx int, ok bool) {
	if len(got) != len(want) {
		return math.Inf(1), -1, false
	}
	idx = -1
	for i, w := range want {
		g := float64(got[i])
		var e float64
		switch {
		case math.IsNaN(g) || math.IsNaN(w):
			e = math.Inf(1)
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				e = math.Inf(1)
			}
		default:
			e = math.Abs(g-w) / math.Max(1, math.Abs(w))
		}
		if e > maxErr || idx < 0 {
			maxErr, idx = e, i
		}
	}
	if idx < 0 {
		idx = 0
	}
	return maxErr, idx, maxErr <= tol
}
