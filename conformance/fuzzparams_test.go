package conformance

import (
	"math"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/reference"
)

// fuzzCapSparse is the largest param tensor FuzzKernels maps, in bytes: a
// tensor past fuzzCapElems elements is a MAP_NORESERVE mapping of which
// only the pages a valid case reads are written.
const fuzzCapSparse = 1 << 36

// fuzzParamShape is param p's shape in case fc: batch is batch_size, a
// named dim its scalar argument.
func fuzzParamShape(v *ir.Variant, p *ir.ParamDecl, sc map[string]int64) []int64 {
	c := &reference.Case{Batch: int(sc["batch_size"]), ParamDims: map[string]int{}}
	for _, d := range v.ParamDimNames() {
		c.ParamDims[d] = int(sc[d])
	}
	return c.ParamShape(v, p)
}

// fuzzParamValue gives the element of param p at a flat index in a case
// of seed: a hash of (seed, name, index), document ids 0..2 for an i32
// param and multiples of 1/1024 in [-0.5, 0.5) for an f32 one, so that a
// tensor of any size has values without being held.
func fuzzParamValue(seed int64, p *ir.ParamDecl) func(int64) float64 {
	h0 := uint64(seed)
	for _, c := range p.Name {
		h0 = h0*31 + uint64(c)
	}
	return func(i int64) float64 {
		x := h0 ^ uint64(i)*0x9e3779b97f4a7c15
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		if p.T == ir.I32 {
			return float64(x % 3)
		}
		return float64(x%1024)/1024 - 0.5
	}
}

// fuzzParamBuffers adds v's param tensors for case fc (rules r) to cb:
// prod(dims) elements each, as the ABI trusts them, holding
// fuzzParamValue. A tensor past fuzzCapElems elements is a sparse mapping
// (up to fuzzCapSparse bytes) in which only the elements the reference
// reads for a valid case are written; the other elements read 0, and no
// read of the reference sees them. A bad case reads no param: its tensors
// hold at most fuzzCapElems elements (a read past them faults). It returns
// each param's values for the reference, or the name of a tensor the test
// cannot map.
func fuzzParamBuffers(v *ir.Variant, fc fuzzCase, r rules, cb *caseBuffers) (map[string]func(int64) float64, string) {
	at := map[string]func(int64) float64{}
	env := map[string]*reference.ParamValue{}
	for _, p := range v.Params {
		at[p.Name] = fuzzParamValue(fc.Seed, p)
		env[p.Name] = &reference.ParamValue{Dims: fuzzParamShape(v, p, fc.Scalars), At: at[p.Name]}
	}
	for _, p := range v.Params {
		n := int64(1) // elements, 1<<40 standing for more
		for _, d := range env[p.Name].Dims {
			if d <= 0 {
				n = 0
				break
			}
			if n > (1<<40)/d {
				n = 1 << 40
			} else {
				n *= d
			}
		}
		var buf *cpurt.Buffer
		switch {
		case r.status != 0 || n <= fuzzCapElems:
			buf = cpurt.NewBuffer(4 * int(min(n, fuzzCapElems)))
			for i := range min(n, fuzzCapElems) {
				setParam(buf, p, i, at[p.Name](i))
			}
		case 4*n <= fuzzCapSparse:
			var err error
			if buf, err = cpurt.NewSparseBuffer(4 * int(n)); err != nil {
				return nil, p.Name
			}
			for _, i := range fuzzParamReads(v, p, env, r) {
				setParam(buf, p, i, at[p.Name](i))
			}
		default:
			return nil, p.Name
		}
		cb.add(p.Name, buf)
	}
	return at, ""
}

func setParam(buf *cpurt.Buffer, p *ir.ParamDecl, i int64, x float64) {
	if p.T == ir.I32 {
		buf.I32()[i] = int32(x)
	} else {
		buf.F32()[i] = float32(x)
	}
}

// fuzzParamReads lists the flat indices of param p that the reference
// reads for the valid case r: every read of p in the mask and score, at
// every qo head, query position and kv position of every sequence, inside
// the shape.
func fuzzParamReads(v *ir.Variant, p *ir.ParamDecl, env map[string]*reference.ParamValue, r rules) []int64 {
	var reads []*ir.ParamRead
	find := func(e ir.Expr) {
		ir.VisitExpr(e, func(e ir.Expr) {
			if x, ok := e.(*ir.ParamRead); ok && x.Name == p.Name {
				reads = append(reads, x)
			}
		})
	}
	for _, m := range v.Masks {
		if m.Kind == ir.MaskExpr {
			find(m.Expr)
		}
	}
	if v.Score != nil {
		find(v.Score)
	}
	dims := env[p.Name].Dims
	seen := map[int64]bool{}
	var out []int64
	for b := range r.qLen {
		for i := range r.qLen[b] {
			q := r.kvLen[b] - r.qLen[b] + i
			for h := range v.QOHeads {
				for kv := range r.kvLen[b] {
					e := &reference.Env{QPos: int64(q), KVPos: int64(kv), Head: int64(h), Batch: int64(b), QOHeads: v.QOHeads, Params: env}
					for _, x := range reads {
						flat, in := int64(0), true
						for k, ix := range x.Index {
							j := reference.EvalInt(ix, e)
							if j < 0 || j >= dims[k] {
								in = false
								break
							}
							flat = flat*dims[k] + j
						}
						if in && !seen[flat] {
							seen[flat] = true
							out = append(out, flat)
						}
					}
				}
			}
		}
	}
	return out
}

// fuzzStatus is the status the documented rules give fc, and false when
// the case's documented reads pass what the test allocates (it would be
// skipped).
func fuzzStatus(v *ir.Variant, fc fuzzCase) (int32, bool) {
	switch fc.Role {
	case ir.RolePrefill, ir.RoleDecode, ir.RolePrefillRagged:
		r := validateRules(v, fc)
		return r.status, r.beyond == ""
	case ir.RoleAppend, ir.RoleQKVAppend:
		st, _ := slotRules(v, fc)
		return st, true
	case ir.RoleCopyPage:
		st, _ := copyPageRules(v, fc)
		return st, true
	case ir.RoleReadKV, ir.RoleGatherPages, ir.RoleScatterPages, ir.RoleCompactCopy:
		st, _, beyond := moveRules(v, fc)
		return st, beyond == ""
	}
	return 0, false
}

// TestFuzzSeedsReachChecks: FuzzKernels' seed corpus alone reaches every
// argument check of the page kernels, qkv_append and prefill_ragged (each
// status their rules can give, in every variant that has the kernel and
// is seeded with mutations: all but the plain 8-bit caches, whose checks
// are the plain cache's; MLA's page kernels are their own), and
// for the param variant, on each of its kernels, a negative named dim, a
// dim of 0, a dim shorter than the longest kv_len and a tensor past
// fuzzCapElems elements (the sparse mapping), the last three in valid
// calls. A seed that no longer reaches a check leaves it to chance. The
// default run's part of the corpus (fuzzSeedStride) reaches them too.
func TestFuzzSeedsReachChecks(t *testing.T) {
	t.Parallel()
	t.Run("all", func(t *testing.T) { testFuzzSeedsReachChecks(t, fuzzSeedsFor(true)) })
	t.Run("default", func(t *testing.T) { testFuzzSeedsReachChecks(t, fuzzSeedsFor(false)) })
}

func testFuzzSeedsReachChecks(t *testing.T, seeds [][]byte) {
	slots := []int32{0, lower.ErrBadArgument, lower.ErrTooLarge, lower.ErrBadSlot}
	pageIDs := []int32{0, lower.ErrBadArgument, lower.ErrTooLarge, lower.ErrBadPageID}
	want := map[ir.Role][]int32{
		ir.RoleAppend:        slots,
		ir.RoleQKVAppend:     slots,
		ir.RoleReadKV:        slots,
		ir.RoleGatherPages:   pageIDs,
		ir.RoleScatterPages:  pageIDs,
		ir.RoleCompactCopy:   {0, lower.ErrBadArgument, lower.ErrTooLarge, lower.ErrBadKVIndptr, lower.ErrBadSlot},
		ir.RolePrefillRagged: {0, lower.ErrBadArgument, lower.ErrBadQOIndptr, lower.ErrBadKVIndptr, lower.ErrBadKVLen, lower.ErrQLenExceedsKVLen},
	}
	type key struct {
		v    string
		role ir.Role
	}
	got := map[key]map[int32]bool{}
	params := map[key]map[string]bool{}
	for _, seed := range seeds {
		fc := genFuzzCase(seed)
		v := fuzzVariants()[fc.V]
		st, ok := fuzzStatus(v, fc)
		if !ok {
			continue
		}
		k := key{v.Name, fc.Role}
		if got[k] == nil {
			got[k], params[k] = map[int32]bool{}, map[string]bool{}
		}
		got[k][st] = true
		if len(v.Params) == 0 {
			continue
		}
		r := validateRules(v, fc)
		longest := 0
		for _, kv := range r.kvLen {
			longest = max(longest, kv)
		}
		for _, d := range v.ParamDimNames() {
			switch x := fc.Scalars[d]; {
			case x < 0:
				params[k]["negative"] = true
			case st != 0 || longest == 0:
			case x == 0:
				params[k]["zero"] = true
			case x < int64(longest):
				params[k]["short"] = true
			}
		}
		for _, p := range v.Params {
			n := int64(1)
			for _, d := range fuzzParamShape(v, p, fc.Scalars) {
				n *= max(d, 0)
			}
			if st == 0 && n > fuzzCapElems {
				params[k]["sparse"] = true
			}
		}
	}
	for _, v := range fuzzVariants() {
		if v.Quantized() && v.MLA == nil {
			continue // seeded unmutated: its checks are those of the plain cache's kernels
		}
		for _, kr := range v.Kernels {
			k := key{v.Name, kr.Role}
			for _, st := range want[kr.Role] {
				count := "n"
				if kr.Role == ir.RoleCompactCopy {
					count = "batch_size"
				}
				if st == lower.ErrTooLarge && !fuzzTooLarge(v, kr.Role, count, math.MaxInt32) {
					continue // no int32 count makes too many items (one kv head)
				}
				if !got[k][st] {
					t.Errorf("%s %s: no seed gives status %d", v.Name, kr.Role, st)
				}
			}
			if len(v.Params) > 0 {
				for _, what := range []string{"negative", "zero", "short", "sparse"} {
					if !params[k][what] {
						t.Errorf("%s %s: no seed has a %s param dim", v.Name, kr.Role, what)
					}
				}
			}
		}
	}
}
