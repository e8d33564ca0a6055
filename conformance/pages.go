package conformance

import (
	"bytes"
	"fmt"
	"math/rand"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/reference"
)

// pagePool is a random K/V pool in storage bytes.
type pagePool struct {
	numPages int
	k, v     []byte
}

// randomPool is a pool of random cache elements (8-bit codes for a
// quantized cache).
func (s *Suite) randomPool(rng *rand.Rand, numPages int) pagePool {
	v := s.V
	slots := numPages * v.KVHeads * v.PageSize
	r := float32(1)
	if v.Quantized() {
		r = reference.CodeRange(v.KVDType)
	}
	gen := func(n int) []byte {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = reference.Round(v.KVDType, (rng.Float32()*2-1)*r)
		}
		return reference.Encode(v.KVDType, xs)
	}
	return pagePool{numPages: numPages, k: gen(slots * v.HeadDimQK), v: gen(slots * v.HeadDimV)}
}

// appendRows are n new K or V rows of d elements per kv head for append:
// values of the variant's dtype (random ones, or, when edges is not nil,
// kv head h's j-th element over the rows is edges[h][j % len]), their
// bytes, and the bytes the cache must hold for each row (the same bytes,
// or each element quantized with its kv head's scale: reference.Quantize,
// bit for bit).
func (s *Suite) appendRows(rng *rand.Rand, n, d int, scales []float32, edges [][]float32) (in, stored []byte) {
	v := s.V
	xs := make([]float32, n*v.KVHeads*d)
	for i := range xs {
		if edges != nil {
			e := edges[i/d%v.KVHeads]
			xs[i] = e[(i/(d*v.KVHeads)*d+i%d)%len(e)]
		} else {
			xs[i] = reference.Round(v.DType, rng.Float32()*2-1)
		}
	}
	in = reference.Encode(v.DType, xs)
	if !v.Quantized() {
		return in, in
	}
	stored = make([]byte, len(xs))
	for i, x := range xs {
		h := i / d % v.KVHeads
		stored[i] = reference.Quantize(v.KVDType, x, scales[h%len(scales)])
	}
	return in, stored
}

// appendScales are random k_scale and v_scale for append (nil for a plain
// cache): about 1/CodeRange, so that a few values saturate.
func (s *Suite) appendScales(rng *rand.Rand) (ks, vs []float32) {
	if !s.V.Quantized() {
		return nil, nil
	}
	r := reference.CodeRange(s.V.KVDType)
	gen := func() []float32 {
		xs := make([]float32, s.V.ScaleLen())
		for i := range xs {
			xs[i] = (0.8 + 0.4*rng.Float32()) / r
		}
		return xs
	}
	return gen(), gen()
}

// headEdges are, per kv head, append's edge inputs (reference.QuantEdges)
// for that head's scale, and the rows of d elements that hold them all.
func (s *Suite) headEdges(scales []float32, d int) (edges [][]float32, rows int) {
	for h := range s.V.KVHeads {
		e := reference.QuantEdges(s.V.KVDType, s.V.DType, scales[h%len(scales)])
		edges = append(edges, e)
		rows = max(rows, (len(e)+d-1)/d)
	}
	return edges, rows
}

// edgeScale is the scale of kv head h in append's edge case: 1 (or, per
// head, a power of two per head, so that x / scale keeps the ties) for K;
// 0.3 times that for V, where x / scale rounds in f32 before the code
// does.
func edgeScale(h int, v bool) float32 {
	s := float32(1) / float32(int(1)<<(h%3))
	if v {
		s *= 0.3
	}
	return s
}

// firstDiff says how many bytes of a pool differ from the model's and
// where the first is, or nothing when they agree.
func firstDiff(name string, got, want []byte) string {
	n, first := 0, -1
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			if n++; first < 0 {
				first = i
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %s: %d bytes differ, first at %d: %#02x, want %#02x", name, n, first, got[first], want[first])
}

// rowSpan is the byte range of the d-element row (page, h, slot) in a pool.
func (s *Suite) rowSpan(page, h, slot, d int) (int, int) {
	size := reference.Size(s.V.KVDType)
	i := reference.PageIndex(s.V, page, h, slot, 0, d) * size
	return i, i + d*size
}

// RunPageKernels checks append and copy_page (whichever the suite has)
// against a byte-exact model, and, on the CPU, their bad-input statuses
// (which must leave the pool untouched).
func (s *Suite) RunPageKernels(seed int64) []Result {
	var out []Result
	v := s.V
	rng := rand.New(rand.NewSource(seed))
	if _, ok := s.Entries[ir.RoleAppend]; ok {
		// Corruptions of a valid append of n = 7 rows into a pool of 5 pages (7
		// with page_size 1):
		// the status each must return (the GPU kernel skips bad slots
		// instead, so those run on the CPU only). A status of 0 means the
		// rows land where the model says.
		type appendCase struct {
			name    string
			st      int32
			cpuOnly bool
			brk     func(pm []int32, vals map[string]int64)
			// edges: every row element is one of reference.QuantEdges
			// (ties, max and beyond, inf, NaN, ±0, subnormals), enough
			// rows for all of them, none skipped.
			edges bool
		}
		cases := []appendCase{
			{name: "append rows (some skipped)"},
			// The pool is num_pages*page_size slots, counted in i64: a huge
			// pool is valid (its first pages are the real ones).
			{name: "append: num_pages INT32_MAX (a large pool)", brk: func(pm []int32, vals map[string]int64) { vals["num_pages"] = i32max }},
			{name: "append: slot outside the pool", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) {
				pm[len(pm)-1] = int32(vals["num_pages"]) * int32(v.PageSize)
			}},
			{name: "append: slot -2", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) { pm[0] = -2 }},
			{name: "append: slot INT32_MAX", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) { pm[1] = i32max }},
			{name: "append: slot INT32_MIN", st: lower.ErrBadSlot, cpuOnly: true, brk: func(pm []int32, vals map[string]int64) { pm[3] = i32min }},
			{name: "append: n -1", st: lower.ErrBadArgument, brk: func(pm []int32, vals map[string]int64) { vals["n"] = -1 }},
			{name: "append: n INT32_MIN", st: lower.ErrBadArgument, brk: func(pm []int32, vals map[string]int64) { vals["n"] = i32min }},
			{name: "append: num_pages -1", st: lower.ErrBadArgument, brk: func(pm []int32, vals map[string]int64) { vals["num_pages"] = -1 }},
		}
		if v.Quantized() {
			cases = append(cases, appendCase{name: "append: quantizer edges", edges: true})
		}
		if v.KVHeads > 1 { // n * kv_heads rows pass 2^31-1
			cases = append(cases, appendCase{name: "append: n INT32_MAX", st: lower.ErrTooLarge, brk: func(pm []int32, vals map[string]int64) { vals["n"] = i32max }})
		}
		for _, c := range cases {
			if c.cpuOnly && !s.checksTables {
				continue
			}
			r := Result{Variant: v.Name, Kernel: s.Entries[ir.RoleAppend].Symbol, Case: c.name}
			n := 7
			ks, vs := s.appendScales(rng)
			var kEdges, vEdges [][]float32
			if c.edges {
				for h := range ks {
					ks[h], vs[h] = edgeScale(h, false), edgeScale(h, true)
				}
				var kRows, vRows int
				kEdges, kRows = s.headEdges(ks, v.HeadDimQK)
				vEdges, vRows = s.headEdges(vs, v.HeadDimV)
				n = max(kRows, vRows)
			}
			pool := s.randomPool(rng, max(5, (n+v.PageSize-1)/v.PageSize)) // at least n slots
			perm := rng.Perm(pool.numPages * v.PageSize)
			pm := make([]int32, n)
			for i := range pm {
				pm[i] = int32(perm[i])
				if i%3 == 2 && !c.edges {
					pm[i] = -1
				}
			}
			kNew, kStored := s.appendRows(rng, n, v.HeadDimQK, ks, kEdges)
			vNew, vStored := s.appendRows(rng, n, v.HeadDimV, vs, vEdges)
			size := reference.Size(v.KVDType)
			vals := map[string]int64{"n": int64(n), "num_pages": int64(pool.numPages)}
			if c.brk != nil {
				c.brk(pm, vals)
			}
			want := pagePool{numPages: pool.numPages, k: bytes.Clone(pool.k), v: bytes.Clone(pool.v)}
			if c.st == 0 {
				for i, slot := range pm {
					if slot < 0 {
						continue
					}
					for h := range v.KVHeads {
						a, b := s.rowSpan(int(slot)/v.PageSize, h, int(slot)%v.PageSize, v.HeadDimQK)
						copy(want.k[a:b], kStored[(i*v.KVHeads+h)*v.HeadDimQK*size:][:v.HeadDimQK*size])
						a, b = s.rowSpan(int(slot)/v.PageSize, h, int(slot)%v.PageSize, v.HeadDimV)
						copy(want.v[a:b], vStored[(i*v.KVHeads+h)*v.HeadDimV*size:][:v.HeadDimV*size])
					}
				}
			}
			cb := &caseBuffers{vals: vals}
			cb.add("k", cpurt.U8Buffer(kNew))
			cb.add("v", cpurt.U8Buffer(vNew))
			cb.add("position_map", cpurt.I32Buffer(pm))
			kp := cb.add("k_pages", cpurt.U8Buffer(pool.k))
			vp := cb.add("v_pages", cpurt.U8Buffer(pool.v))
			if v.Quantized() {
				cb.add("k_scale", cpurt.F32Buffer(ks))
				cb.add("v_scale", cpurt.F32Buffer(vs))
			}
			st, err := s.run(ir.RoleAppend, cb)
			r.Pass = err == nil && st == c.st && bytes.Equal(kp.U8(), want.k) && bytes.Equal(vp.U8(), want.v)
			r.Note = fmt.Sprintf("status %d (want %d), pools as expected: %v %v%s%s", st, c.st, bytes.Equal(kp.U8(), want.k), bytes.Equal(vp.U8(), want.v),
				firstDiff("k_pages", kp.U8(), want.k), firstDiff("v_pages", vp.U8(), want.v))
			if err != nil {
				r.Note = err.Error()
			}
			cb.free()
			out = append(out, r)
		}
	}
	if _, ok := s.Entries[ir.RoleCopyPage]; ok {
		// np 0 means the real pool's 5 pages; a huge num_pages is a valid
		// pool whose first pages are the real ones.
		cases := []struct {
			name                 string
			src, dst, length, st int
			np                   int64
		}{
			{"copy_page partial", 1, 3, v.PageSize - v.PageSize/2, 0, 0},
			{"copy_page full", 4, 0, v.PageSize, 0, 0},
			{"copy_page bad src", 5, 0, 1, lower.ErrBadPageID, 0},
			{"copy_page bad dst", 0, -1, 1, lower.ErrBadPageID, 0},
			{"copy_page length > page_size", 0, 1, v.PageSize + 1, lower.ErrBadLength, 0},
			{"copy_page src INT32_MAX", i32max, 0, 1, lower.ErrBadPageID, 0},
			{"copy_page dst INT32_MIN", 0, i32min, 1, lower.ErrBadPageID, 0},
			{"copy_page length INT32_MAX", 0, 1, i32max, lower.ErrBadLength, 0},
			{"copy_page length INT32_MIN", 0, 1, i32min, lower.ErrBadLength, 0},
			{"copy_page num_pages -1", 2, 3, v.PageSize, lower.ErrBadArgument, -1},
			{"copy_page num_pages INT32_MIN", 2, 3, 1, lower.ErrBadArgument, i32min},
			{"copy_page num_pages INT32_MAX (a large pool)", 2, 3, v.PageSize, 0, i32max},
		}
		for _, c := range cases {
			r := Result{Variant: v.Name, Kernel: s.Entries[ir.RoleCopyPage].Symbol, Case: c.name}
			pool := s.randomPool(rng, 5)
			want := pagePool{k: bytes.Clone(pool.k), v: bytes.Clone(pool.v)}
			if c.st == 0 {
				for slot := range c.length {
					for h := range v.KVHeads {
						a, b := s.rowSpan(c.src, h, slot, v.HeadDimQK)
						x, y := s.rowSpan(c.dst, h, slot, v.HeadDimQK)
						copy(want.k[x:y], pool.k[a:b])
						a, b = s.rowSpan(c.src, h, slot, v.HeadDimV)
						x, y = s.rowSpan(c.dst, h, slot, v.HeadDimV)
						copy(want.v[x:y], pool.v[a:b])
					}
				}
			}
			np := c.np
			if np == 0 {
				np = 5
			}
			cb := &caseBuffers{vals: map[string]int64{"num_pages": np, "src_page": int64(c.src), "dst_page": int64(c.dst), "length": int64(c.length)}}
			kp := cb.add("k_pages", cpurt.U8Buffer(pool.k))
			vp := cb.add("v_pages", cpurt.U8Buffer(pool.v))
			st, err := s.run(ir.RoleCopyPage, cb)
			r.Pass = err == nil && int(st) == c.st && bytes.Equal(kp.U8(), want.k) && bytes.Equal(vp.U8(), want.v)
			r.Note = fmt.Sprintf("status %d (want %d)", st, c.st)
			cb.free()
			out = append(out, r)
		}
	}
	return out
}
