package frontend

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"

	"github.com/attnc/attnc/ir"
)

// checker validates a syntax tree into variants. It records every error;
// callers sort them into source order, so the result does not depend on
// the order in which checks run.
type checker struct {
	file string
	errs []*ir.PosError
	// badParams are the params of the variant being checked whose line
	// has an error: reads of them report nothing more.
	badParams map[string]bool
}

// errorf records an error at p.
func (c *checker) errorf(p lexer.Position, format string, args ...any) {
	c.errs = append(c.errs, &ir.PosError{Pos: c.pos(p), Msg: fmt.Sprintf(format, args...)})
}

// sortErrors sorts errs into source order (stable: errors at one position
// keep the order they were found in).
func sortErrors(errs []*ir.PosError) {
	slices.SortStableFunc(errs, func(a, b *ir.PosError) int {
		if a.Pos.Line != b.Pos.Line {
			return a.Pos.Line - b.Pos.Line
		}
		return a.Pos.Col - b.Pos.Col
	})
}

// pos converts p to an ir.Pos in the checked file.
func (c *checker) pos(p lexer.Position) ir.Pos { return position(c.file, p) }

// settings lists the keywords that may start a line of a variant.
var settings = []string{"heads", "head_dim", "dtype", "cache", "mask", "sinks", "score", "scale", "rope", "mla", "lse", "kernels", "qk_norm", "param"}

// Checked is one variant of a spec file as the checker saw it: the
// variant, or the errors found in it (in source order).
type Checked struct {
	Variant *ir.Variant    // nil when Errs is not empty
	Errs    []*ir.PosError // every error of this variant, in source order
}

// checkFile checks every variant of f on its own and rejects names that
// are too long or the same as an earlier one's, ignoring case (a name
// becomes C symbols and upper-case macros and include guards). A file
// without a variant is an error, returned alone.
func (c *checker) checkFile(f *fileAST) []Checked {
	var out []Checked
	type named struct {
		name string
		pos  lexer.Position
	}
	first := map[string]named{}
	for i, va := range f.Variants {
		if va == nil || va.Name == nil {
			continue
		}
		c.errs = nil
		if i >= MaxVariants {
			c.errorf(va.Name.Pos, "more than %d variants in one spec; the limit is %d (put the others in another spec file)", MaxVariants, MaxVariants)
		}
		name := va.Name.Name
		if n := len(name); n > ir.MaxNameLen {
			c.errorf(va.Name.Pos, "variant name is %d characters long; the limit is %d (it prefixes every C symbol and macro)", n, ir.MaxNameLen)
		}
		key := strings.ToLower(name)
		if p, dup := first[key]; dup && p.name == name {
			c.errorf(va.Name.Pos, "duplicate variant %s (first at %s)", name, c.pos(p.pos))
		} else if dup {
			c.errorf(va.Name.Pos, "variant %s collides with %s (first at %s): names must differ in more than case, since they name C macros and include guards", name, p.name, c.pos(p.pos))
		} else {
			first[key] = named{name, va.Name.Pos}
		}
		v := c.variant(va)
		if len(c.errs) > 0 {
			sortErrors(c.errs)
			out = append(out, Checked{Errs: c.errs})
		} else {
			out = append(out, Checked{Variant: v})
		}
	}
	c.errs = nil
	if len(out) == 0 {
		c.errorf(lexer.Position{Line: 1, Column: 1}, "the spec has no variant (write variant NAME { ... }; see the examples directory)")
	}
	return out
}

// MaxVariants bounds the variants of one spec, so that checking or
// building any spec within the limits takes seconds (each variant compiles
// to its own kernels).
const MaxVariants = 8

// lines holds a variant's settings, one per keyword.
type lines struct {
	heads, headDim *argsStmt
	lse            *argsStmt
	mla            *mlaStmt
	dtype          *wordStmt
	cache, rope    *callStmt
	sinks          *callStmt
	qkNorm         *callStmt
	mask           *maskStmt
	score          *scoreStmt
	scale          *scaleStmt
	kernels        *kernelsStmt
	params         []*paramStmt // one per param line, in source order
	// guessed are the settings an unknown setting's name is close to
	// (head_dims: head_dim); their "missing line" errors would only
	// repeat that error.
	guessed map[string]bool
}

// keyword returns the word that starts s and its position.
func (s *stmtAST) keyword() (string, lexer.Position) {
	switch {
	case s.Args != nil:
		return s.Args.Kw, s.Args.Pos
	case s.MLA != nil:
		return s.MLA.Kw, s.MLA.Pos
	case s.Word != nil:
		return s.Word.Kw, s.Word.Pos
	case s.Call != nil:
		return s.Call.Kw, s.Call.Pos
	case s.Mask != nil:
		return s.Mask.Kw, s.Mask.Pos
	case s.Score != nil:
		return s.Score.Kw, s.Score.Pos
	case s.Scale != nil:
		return s.Scale.Kw, s.Scale.Pos
	case s.Kernels != nil:
		return s.Kernels.Kw, s.Kernels.Pos
	case s.Param != nil:
		return s.Param.Kw, s.Param.Pos
	case s.Unknown != nil:
		return s.Unknown.Word, s.Unknown.Pos
	}
	return "", lexer.Position{}
}

// collect sorts a variant's lines by keyword, rejecting unknown, duplicate
// and run-on lines.
func (c *checker) collect(va *variantAST) *lines {
	l := &lines{guessed: map[string]bool{}}
	first := map[string]lexer.Position{}
	prevStmt := false
	for _, it := range va.Items {
		if it == nil || it.Stmt == nil {
			prevStmt = false
			continue
		}
		s := it.Stmt
		kw, pos := s.keyword()
		if prevStmt {
			c.errorf(pos, "unexpected %q: each setting must start on a new line", kw)
		}
		prevStmt = true
		if s.Unknown != nil {
			if g := closest(kw, settings); g != "" {
				c.errorf(pos, "unknown setting %q (did you mean %s?)", kw, g)
				l.guessed[g] = true
			} else {
				c.errorf(pos, "unknown setting %q (known: %s)", kw, strings.Join(settings, ", "))
			}
			continue
		}
		if s.Param != nil {
			l.params = append(l.params, s.Param)
			continue
		}
		if p, dup := first[kw]; dup {
			c.errorf(pos, "duplicate %s (first at %s)", kw, c.pos(p))
			continue
		}
		first[kw] = pos
		switch kw {
		case "heads":
			l.heads = s.Args
		case "head_dim":
			l.headDim = s.Args
		case "lse":
			l.lse = s.Args
		case "mla":
			l.mla = s.MLA
		case "dtype":
			l.dtype = s.Word
		case "cache":
			l.cache = s.Call
		case "rope":
			l.rope = s.Call
		case "sinks":
			l.sinks = s.Call
		case "qk_norm":
			l.qkNorm = s.Call
		case "mask":
			l.mask = s.Mask
		case "score":
			l.score = s.Score
		case "scale":
			l.scale = s.Scale
		case "kernels":
			l.kernels = s.Kernels
		}
	}
	return l
}

// variant checks one variant and fills in its defaults.
func (c *checker) variant(va *variantAST) *ir.Variant {
	v := &ir.Variant{
		Name:     va.Name.Name,
		Pos:      c.pos(va.Pos),
		DType:    ir.DTF16,
		PageSize: 16,
		Layout:   ir.HND,
		Table:    ir.CSR,
		CachePos: c.pos(va.Pos),
		HeadsPos: c.pos(va.Pos),
	}
	l := c.collect(va)
	if l.mla != nil {
		c.mla(v, l.mla)
		if l.heads != nil {
			c.errorf(l.heads.Pos, "heads cannot be combined with mla (mla sets the heads)")
		}
		if l.headDim != nil {
			c.errorf(l.headDim.Pos, "head_dim cannot be combined with mla (mla sets head_dim qk = kv_lora_rank + rope_dim, v = kv_lora_rank)")
		}
		if l.scale == nil {
			c.errorf(l.mla.Pos, "mla requires an explicit scale")
		}
	} else {
		if l.heads == nil && !l.guessed["heads"] {
			c.errorf(va.Name.Pos, "missing heads line (heads qo = N, kv = M)")
		} else if l.heads != nil {
			c.heads(v, l.heads)
		}
		if l.headDim == nil && !l.guessed["head_dim"] {
			c.errorf(va.Name.Pos, "missing head_dim line (head_dim N, or head_dim qk = N, v = M)")
		} else if l.headDim != nil {
			c.headDim(v, l.headDim)
		}
	}
	if l.dtype != nil {
		c.dtype(v, l.dtype)
	}
	v.KVDType = v.DType
	if l.cache != nil {
		c.cache(v, l.cache)
	}
	v.Params = c.params(l.params, v)
	v.Masks = []ir.MaskClause{{Kind: ir.MaskCausal, Pos: v.Pos}}
	if l.mask != nil {
		v.Masks = c.mask(l.mask, v)
	}
	if l.sinks != nil {
		v.Sinks = c.sinks(l.sinks)
	}
	if l.rope != nil {
		v.Rope = c.rope(l.rope, v.HeadDimQK)
	}
	if l.lse != nil {
		v.LSEBase = c.lseBase(l.lse)
	}
	if l.score != nil {
		v.ScorePos = c.pos(l.score.Pos)
		v.Score = c.scoreExpr(l.score.Expr, v)
	}
	if l.scale != nil {
		if f, ok := c.floatVal(l.scale.Val, "scale"); ok {
			if f <= 0 {
				c.errorf(l.scale.Val.Pos, "scale must be positive, got %s", l.scale.Val.text())
			}
			v.Scale, v.ScaleExplicit = f, true
		}
	} else if v.HeadDimQK > 0 {
		v.Scale = 1 / math.Sqrt(float64(v.HeadDimQK))
	}
	if len(c.errs) == 0 { // an expression with an error reads nothing
		c.paramsRead(l.params, v)
	}
	v.Kernels = []ir.KernelRef{{Role: ir.RolePrefill, Pos: v.Pos}, {Role: ir.RoleDecode, Pos: v.Pos}, {Role: ir.RoleMergeState, Pos: v.Pos}}
	if l.kernels != nil {
		v.Kernels = c.kernels(l.kernels)
	}
	if l.qkNorm != nil {
		v.QKNorm = c.qkNorm(l.qkNorm)
		if !v.HasRole(ir.RoleQKVAppend) {
			c.errorf(l.qkNorm.Pos, "qk_norm needs qkv_append in the kernels line (qkv_append applies it)")
		}
	}
	for _, k := range v.Kernels {
		if k.Role == ir.RoleQKVAppend && v.HeadDimQK != v.HeadDimV && v.MLA == nil {
			c.errs = append(c.errs, &ir.PosError{Pos: k.Pos, Msg: fmt.Sprintf("kernel qkv_append needs head_dim qk = v, got qk = %d, v = %d", v.HeadDimQK, v.HeadDimV)})
		}
	}
	return v
}

// heads checks `heads qo = N, kv = M`.
func (c *checker) heads(v *ir.Variant, s *argsStmt) {
	v.HeadsPos = c.pos(s.Pos)
	args, ok := c.kwargs("heads", s.Args, "qo", "kv")
	qoArg := args["qo"]
	if qoArg == nil {
		if ok {
			c.errorf(s.Pos, "heads needs qo = N")
		}
		return
	}
	qo, ok := c.limitInt(qoArg.Val, "qo heads", ir.MaxHeads)
	kv, kvOK := qo, ok
	if kvArg := args["kv"]; kvArg != nil {
		kv, kvOK = c.limitInt(kvArg.Val, "kv heads", ir.MaxHeads)
		if ok && kvOK && qo%kv != 0 {
			c.errorf(kvArg.Val.Pos, "kv heads (%d) must divide qo heads (%d)", kv, qo)
		}
	}
	if ok && kvOK {
		v.QOHeads, v.KVHeads = qo, kv
	}
}

// headDim checks `head_dim N` and `head_dim qk = N, v = M`.
func (c *checker) headDim(v *ir.Variant, s *argsStmt) {
	if len(s.Args) == 1 && s.Args[0] != nil && s.Args[0].Key == nil {
		if n, ok := c.limitInt(s.Args[0].Val, "head_dim", ir.MaxHeadDimV); ok {
			v.HeadDimQK, v.HeadDimV = n, n
		}
		return
	}
	args, ok := c.kwargs("head_dim", s.Args, "qk", "v")
	qkArg := args["qk"]
	if qkArg == nil {
		if ok {
			c.errorf(s.Pos, "head_dim needs a size (head_dim N, or head_dim qk = N, v = M)")
		}
		return
	}
	qk, ok := c.limitInt(qkArg.Val, "head_dim qk", ir.MaxHeadDimQK)
	dv, vOK := qk, ok
	if vArg := args["v"]; vArg != nil {
		dv, vOK = c.limitInt(vArg.Val, "head_dim v", ir.MaxHeadDimV)
	} else if ok && qk > ir.MaxHeadDimV {
		c.errorf(qkArg.Val.Pos, "head_dim v (= qk, %d) is larger than the kernels serve: at most %d (give v = M)", qk, ir.MaxHeadDimV)
		vOK = false
	}
	if ok && vOK {
		v.HeadDimQK, v.HeadDimV = qk, dv
	}
}

// mla checks `mla(heads = H, kv_lora_rank = R, rope_dim = D)` and sets the
// shapes it implies.
func (c *checker) mla(v *ir.Variant, s *mlaStmt) {
	v.HeadsPos = c.pos(s.Pos)
	names := []string{"heads", "kv_lora_rank", "rope_dim"}
	args, argsOK := c.kwargs("mla(...)", s.Args.list(), names...)
	vals := make([]int, len(names))
	ok := true
	for i, n := range names {
		a := args[n]
		if a == nil {
			if argsOK {
				c.errorf(s.Pos, "mla needs %s = N", n)
			}
			ok = false
			continue
		}
		var good bool
		vals[i], good = c.posInt(a.Val, "mla "+n)
		ok = ok && good
	}
	if !ok {
		return
	}
	// The limits of the shapes MLA implies: heads, head_dim v =
	// kv_lora_rank, head_dim qk = kv_lora_rank + rope_dim.
	if vals[0] > ir.MaxHeads {
		c.errorf(args["heads"].Val.Pos, "mla heads %d is more than the kernels serve: at most %d", vals[0], ir.MaxHeads)
		ok = false
	}
	if vals[1] > ir.MaxHeadDimV {
		c.errorf(args["kv_lora_rank"].Val.Pos, "mla kv_lora_rank %d is larger than the kernels serve: at most %d (head_dim v)", vals[1], ir.MaxHeadDimV)
		ok = false
	} else if vals[1]+vals[2] > ir.MaxHeadDimQK {
		c.errorf(args["rope_dim"].Val.Pos, "mla kv_lora_rank + rope_dim = %d is larger than the kernels serve: at most %d (head_dim qk)", vals[1]+vals[2], ir.MaxHeadDimQK)
		ok = false
	}
	if !ok {
		return
	}
	v.MLA = &ir.MLA{Heads: vals[0], KVLoraRank: vals[1], RopeDim: vals[2], Pos: c.pos(s.Pos)}
	v.QOHeads, v.KVHeads = vals[0], 1
	v.HeadDimQK, v.HeadDimV = vals[1]+vals[2], vals[1]
}

// dtype checks `dtype f32|f16|bf16`.
func (c *checker) dtype(v *ir.Variant, s *wordStmt) {
	dt, ok := ir.DTypeByName(s.Word.Name)
	if ok && dt.Info().KVOnly {
		c.errorf(s.Word.Pos, "dtype %s is a KV cache code: write cache paged(..., kv_dtype = %s) and keep dtype for q and o (%s)", s.Word.Name, s.Word.Name, strings.Join(ir.DTypeNames(false), ", "))
		return
	}
	if !ok {
		c.errorf(s.Word.Pos, "unknown dtype %q (known: %s)", s.Word.Name, strings.Join(ir.DTypeNames(false), ", "))
		return
	}
	v.DType = dt
}

// cache checks `cache paged(page_size = N, layout = L, table = T)`.
func (c *checker) cache(v *ir.Variant, s *callStmt) {
	v.CachePos = c.pos(s.Pos)
	if s.Name.Name != "paged" {
		c.errorf(s.Name.Pos, "unknown cache %q (known: paged)", s.Name.Name)
		return
	}
	args, _ := c.kwargs("paged(...)", s.Args.list(), "page_size", "layout", "table", "kv_dtype", "kv_scale")
	if a := args["page_size"]; a != nil {
		if n, ok := c.intVal(a.Val, "page_size"); ok {
			if !ir.ValidPageSize(n) {
				c.errorf(a.Val.Pos, "page_size %d is not valid: use a power of two from 1 to 256 (1, 2, 4, ..., 256)", n)
			}
			v.PageSize = n
		}
	}
	if a := args["layout"]; a != nil {
		if w, ok := c.wordVal(a.Val, "layout"); ok {
			switch w {
			case "HND":
				v.Layout = ir.HND
			case "NHD":
				v.Layout = ir.NHD
			default:
				c.errorf(a.Val.Pos, "unknown layout %q (known: HND, NHD)", w)
			}
		}
	}
	if a := args["table"]; a != nil {
		if w, ok := c.wordVal(a.Val, "table"); ok {
			switch w {
			case "csr":
				v.Table = ir.CSR
			case "block_table":
				v.Table = ir.BlockTable
			default:
				c.errorf(a.Val.Pos, "unknown table %q (known: csr, block_table)", w)
			}
		}
	}
	c.kvDType(v, args["kv_dtype"], args["kv_scale"])
}

// kvDType checks `kv_dtype = e4m3 | e5m2 | i8` and `kv_scale = per_tensor
// | per_head` of a cache (dtype and mla, read before, give the default
// kv_dtype and refuse per_head).
func (c *checker) kvDType(v *ir.Variant, dt, scale *argAST) {
	v.KVDType = v.DType
	codes := strings.Join(ir.DTypeNames(true), ", ")
	if dt != nil {
		if w, ok := c.wordVal(dt.Val, "kv_dtype"); ok {
			switch d, known := ir.DTypeByName(w); {
			case !known:
				c.errorf(dt.Val.Pos, "unknown kv_dtype %q (known: %s)", w, codes)
			case d.Info().KVOnly:
				v.KVDType, v.KVScale = d, ir.KVScalePerTensor
			case d != v.DType:
				c.errorf(dt.Val.Pos, "kv_dtype %s differs from dtype %s: the cache holds dtype values or 8-bit codes (%s)", w, v.DType, codes)
			}
		}
	}
	if scale == nil {
		return
	}
	w, ok := c.wordVal(scale.Val, "kv_scale")
	if !ok {
		return
	}
	switch w {
	case "per_tensor", "per_head":
	default:
		c.errorf(scale.Val.Pos, "unknown kv_scale %q (known: per_tensor, per_head)", w)
		return
	}
	if !v.Quantized() {
		c.errorf(scale.Pos, "kv_scale needs an 8-bit kv_dtype (%s)", codes)
		return
	}
	if w == "per_head" {
		if v.MLA != nil {
			c.errorf(scale.Val.Pos, "kv_scale = per_head is not valid with mla: its one latent cache (ckv and kpe) has one scale, per_tensor")
			return
		}
		v.KVScale = ir.KVScalePerHead
	}
}

// maskKinds maps the names of argument-free mask clauses to their kinds.
var maskKinds = map[string]ir.MaskKind{"causal": ir.MaskCausal, "none": ir.MaskNone, "tree": ir.MaskTree, "custom": ir.MaskCustom}

// mask checks the clauses of a mask line.
func (c *checker) mask(s *maskStmt, v *ir.Variant) []ir.MaskClause {
	var out []ir.MaskClause
	for _, cl := range s.Clauses {
		if cl == nil {
			continue
		}
		mc := ir.MaskClause{Pos: c.pos(cl.Pos)}
		if k, ok := maskKinds[cl.Name]; ok {
			mc.Kind = k
			if cl.Args != nil {
				c.errorf(cl.Args.Pos, "mask %s takes no arguments", cl.Name)
			}
		} else if cl.Expr != nil {
			mc.Kind, mc.Expr = ir.MaskExpr, c.maskExpr(cl.Expr, v)
		} else if cl.Name == "window" {
			mc.Kind = ir.MaskWindow
			mc.Left = c.window(cl)
		} else {
			c.errorf(cl.Pos, "unknown mask %q (known: causal, none, window, tree, custom, expr)", cl.Name)
		}
		out = append(out, mc)
	}
	return out
}

// window checks `window(left = W)` (W >= 0: FlashInfer's window_left) and
// `window(size = S)` (S >= 1: the sliding_window of HF / vLLM / Mistral /
// Gemma configs, which is left = S - 1), and returns W.
func (c *checker) window(cl *clauseAST) int {
	args, ok := c.kwargs("window(...)", cl.Args.list(), "left", "size")
	left, size := args["left"], args["size"]
	switch {
	case left != nil && size != nil:
		a, b := left, size
		if size.Pos.Offset < left.Pos.Offset {
			a, b = size, left
		}
		c.errorf(b.Pos, "window takes left = W or size = S, not both (%s at %s)", *a.Key, c.pos(a.Pos))
	case left != nil:
		if n, ok := c.intVal(left.Val, "window left"); ok {
			if n < 0 {
				c.errorf(left.Val.Pos, "window left must be >= 0, got %d", n)
			}
			return n
		}
	case size != nil:
		if n, ok := c.intVal(size.Val, "window size"); ok {
			if n < 1 {
				c.errorf(size.Val.Pos, "window size must be >= 1 (the query itself), got %d", n)
			}
			return n - 1
		}
	case ok:
		c.errorf(cl.Pos, "window needs left = W (FlashInfer's window_left) or size = S (HF/vLLM sliding_window; left = S - 1)")
	}
	return 0
}

// lseBase checks `lse base = e | 2`.
func (c *checker) lseBase(s *argsStmt) ir.LSEBase {
	args, ok := c.kwargs("lse", s.Args, "base")
	a := args["base"]
	if a == nil {
		if ok {
			c.errorf(s.Pos, "lse needs base = e or base = 2")
		}
		return ir.LSEBaseE
	}
	switch a.Val.text() {
	case "e":
		return ir.LSEBaseE
	case "2":
		return ir.LSEBase2
	}
	c.errorf(a.Val.Pos, "unknown lse base %s (known: e, the natural log; 2, as FlashInfer and TVM)", a.Val.text())
	return ir.LSEBaseE
}

// sinks checks `sinks tokens(N)` and `sinks learned`.
func (c *checker) sinks(s *callStmt) *ir.Sinks {
	out := &ir.Sinks{Pos: c.pos(s.Pos)}
	switch s.Name.Name {
	case "tokens":
		args := s.Args.list()
		if len(args) != 1 || args[0] == nil || args[0].Key != nil {
			c.errorf(s.Name.Pos, "sinks tokens needs a count, e.g. tokens(4)")
			return out
		}
		if n, ok := c.intVal(args[0].Val, "sinks tokens"); ok {
			if n < 1 {
				c.errorf(args[0].Val.Pos, "sinks tokens must be at least 1, got %d", n)
			}
			out.Kind, out.Tokens = ir.SinkTokens, n
		}
	case "learned":
		out.Kind = ir.SinkLearned
		if s.Args != nil {
			c.errorf(s.Args.Pos, "sinks learned takes no arguments")
		}
	default:
		c.errorf(s.Name.Pos, "unknown sinks %q (known: tokens, learned)", s.Name.Name)
	}
	return out
}

// ropeStyles names the RoPE styles.
var ropeStyles = map[string]ir.RopeStyle{"normal": ir.RopeNormal, "llama3": ir.RopeLlama3, "yarn": ir.RopeYarn, "factors": ir.RopeFactors}

// ropeArgs lists the arguments each style accepts, in message order.
var ropeArgs = map[ir.RopeStyle][]string{
	ir.RopeNormal:  {"theta", "style", "pairs", "rotary_dim"},
	ir.RopeLlama3:  {"theta", "style", "pairs", "rotary_dim", "factor", "low_freq", "high_freq", "original_max"},
	ir.RopeYarn:    {"theta", "style", "pairs", "rotary_dim", "factor", "original_max", "beta_fast", "beta_slow", "attn_factor", "mscale", "mscale_all_dim", "truncate"},
	ir.RopeFactors: {"theta", "style", "pairs", "rotary_dim", "attn_factor"},
	ir.RopeTable:   {"pairs", "rotary_dim"},
}

// ropeRuntimeArgs are kernel arguments a spec might try to give values.
var ropeRuntimeArgs = map[string]string{
	"rope_factors": "style = factors", "factors": "style = factors",
	"rope_cos": "rope inline(table, ...)", "rope_sin": "rope inline(table, ...)", "rope_positions": "rope inline(table, ...)",
}

// ropeDefaults are filled in when a spec leaves an argument out; a style's
// arguments in neither ropeDefaults nor ropeRequired stay absent.
var ropeDefaults = map[ir.RopeStyle]map[string]float64{
	ir.RopeNormal:  {"theta": 10000},
	ir.RopeLlama3:  {"theta": 10000, "factor": 8, "low_freq": 1, "high_freq": 4, "original_max": 8192},
	ir.RopeYarn:    {"theta": 10000, "beta_fast": 32, "beta_slow": 1},
	ir.RopeFactors: {"theta": 10000, "attn_factor": 1},
}

// ropeRequired lists the arguments a style cannot do without.
var ropeRequired = map[ir.RopeStyle][]string{ir.RopeYarn: {"factor", "original_max"}}

// ropeNonNegative lists the arguments that may be zero (HF treats a zero
// mscale or mscale_all_dim as absent); all others must be positive.
var ropeNonNegative = map[string]bool{"mscale": true, "mscale_all_dim": true}

// rope checks `rope inline(theta = T, style = S, ...)` for a head_dim qk of
// dqk (0 when the head_dim line has an error).
func (c *checker) rope(s *callStmt, dqk int) *ir.Rope {
	out := &ir.Rope{Style: ir.RopeNormal, Params: map[string]float64{}, Pos: c.pos(s.Pos)}
	switch s.Name.Name {
	case "inline":
	case "at_append":
		out.AtAppend = true
	default:
		c.errorf(s.Name.Pos, "unknown rope %q (known: inline, at_append)", s.Name.Name)
		return out
	}
	list := s.Args.list()
	// A leading positional `table`: the angles come from rope_cos/rope_sin.
	if len(list) > 0 && list[0] != nil && list[0].Key == nil && list[0].Val != nil && list[0].Val.Word != nil && *list[0].Val.Word == "table" {
		out.Style, list = ir.RopeTable, list[1:]
	}
	for _, a := range list {
		if a == nil || a.Val == nil {
			continue
		}
		if a.Key == nil && a.Val.Word != nil && *a.Val.Word == "table" {
			c.errorf(a.Pos, "rope %s: table must be the first argument: rope %s(table, rotary_dim = R, pairs = ...)", s.Name.Name, s.Name.Name)
			return out
		}
		if a.Key == nil {
			continue
		}
		if how, ok := ropeRuntimeArgs[*a.Key]; ok {
			c.errorf(a.Pos, "rope %s is a kernel argument, given at run time, not in the spec (write %s)", *a.Key, how)
			return out
		}
		if *a.Key == "style" {
			if out.Style == ir.RopeTable {
				c.errorf(a.Pos, "rope %s(table, ...) takes no style: rope_cos and rope_sin give every angle (known: pairs, rotary_dim)", s.Name.Name)
				return out
			}
			if w, ok := c.wordVal(a.Val, "style"); ok {
				st, known := ropeStyles[w]
				if !known {
					c.errorf(a.Val.Pos, "unknown rope style %q (known: normal, llama3, yarn, factors; or rope inline(table, ...))", w)
				}
				out.Style = st
			}
		}
	}
	what := "rope " + s.Name.Name
	label := what + "(...) with style " + styleName(out.Style)
	if out.Style == ir.RopeTable {
		label = what + "(table, ...)"
	}
	args, argsOK := c.kwargs(label, list, ropeArgs[out.Style]...)
	for k, d := range ropeDefaults[out.Style] {
		out.Params[k] = d
	}
	for k, a := range args {
		switch k {
		case "style":
		case "pairs":
			if w, ok := c.wordVal(a.Val, "pairs"); ok {
				switch w {
				case "half":
					out.Pairs = ir.RopeHalf
				case "interleaved":
					out.Pairs = ir.RopeInterleaved
				default:
					c.errorf(a.Val.Pos, "unknown rope pairs %q (known: half, the rotate_half of HF/NeoX/Llama; interleaved, GPT-J/llama.cpp NORM/DeepSeek)", w)
				}
			}
		case "truncate":
			if w, ok := c.wordVal(a.Val, "truncate"); ok {
				switch w {
				case "true":
					out.Untruncated = false
				case "false":
					out.Untruncated = true
				default:
					c.errorf(a.Val.Pos, "rope truncate must be true or false, got %s", w)
				}
			}
		case "rotary_dim":
			if n, ok := c.intVal(a.Val, "rope rotary_dim"); ok {
				switch {
				case n < 2 || n%2 != 0:
					c.errorf(a.Val.Pos, "rope rotary_dim must be even and at least 2, got %d", n)
				case dqk > 0 && n > dqk:
					c.errorf(a.Val.Pos, "rope rotary_dim (%d) must not exceed head_dim qk (%d)", n, dqk)
				default:
					out.RotaryDim = n
				}
			}
		default:
			f, ok := c.floatVal(a.Val, k)
			if !ok {
				continue
			}
			if f < 0 || f == 0 && !ropeNonNegative[k] {
				c.errorf(a.Val.Pos, "rope %s must be positive, got %s", k, a.Val.text())
			}
			out.Params[k] = f
		}
	}
	if args["rotary_dim"] == nil && dqk%2 != 0 {
		c.errorf(s.Pos, "%s needs an even head_dim qk, got %d (or rotary_dim = R, an even R < %d)", what, dqk, dqk)
	}
	for _, k := range ropeRequired[out.Style] {
		if args[k] == nil && argsOK {
			c.errorf(s.Name.Pos, "rope style %s needs %s = N", styleName(out.Style), k)
		}
	}
	if out.Style == ir.RopeLlama3 && out.Params["high_freq"] <= out.Params["low_freq"] {
		p := s.Name.Pos
		if a := args["high_freq"]; a != nil {
			p = a.Val.Pos
		}
		c.errorf(p, "rope high_freq (%g) must be greater than low_freq (%g)", out.Params["high_freq"], out.Params["low_freq"])
	}
	if out.Params["theta"] == 1 {
		c.errorf(s.Name.Pos, "rope theta must not be 1 (every frequency would be 1 radian per position)")
	}
	out.Theta = out.Params["theta"]
	return out
}

// qkNorm checks `qk_norm rms(eps = E, offset = 0 | 1)` (defaults 1e-6
// and 0).
func (c *checker) qkNorm(s *callStmt) *ir.QKNorm {
	out := &ir.QKNorm{Eps: 1e-6, Pos: c.pos(s.Pos)}
	if s.Name.Name != "rms" {
		c.errorf(s.Name.Pos, "unknown qk_norm %q (known: rms)", s.Name.Name)
		return out
	}
	args, _ := c.kwargs("qk_norm rms(...)", s.Args.list(), "eps", "offset")
	if a := args["eps"]; a != nil {
		if f, ok := c.floatVal(a.Val, "eps"); ok {
			if !(f > 0) || math.IsInf(f, 0) {
				c.errorf(a.Val.Pos, "qk_norm eps must be positive, got %s", a.Val.text())
			}
			out.Eps = f
		}
	}
	if a := args["offset"]; a != nil {
		if f, ok := c.floatVal(a.Val, "offset"); ok {
			if f != 0 && f != 1 {
				c.errorf(a.Val.Pos, "qk_norm offset must be 0 (Qwen3) or 1 (Gemma 3), got %s", a.Val.text())
			}
			out.Offset = f
		}
	}
	return out
}

// styleName is the spec spelling of st.
func styleName(st ir.RopeStyle) string {
	for n, s := range ropeStyles {
		if s == st {
			return n
		}
	}
	return "normal"
}

// roles lists the kernel names, in message order.
var roles = ir.Roles()

// roleList is roles as the unknown-kernel message lists them.
func roleList() string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// kernels checks `kernels a, b, ...`.
func (c *checker) kernels(s *kernelsStmt) []ir.KernelRef {
	var out []ir.KernelRef
	first := map[ir.Role]lexer.Position{}
	for _, n := range s.Names {
		if n == nil {
			continue
		}
		r := ir.Role(n.Name)
		known := false
		for _, k := range roles {
			known = known || k == r
		}
		switch p, dup := first[r]; {
		case !known:
			c.errorf(n.Pos, "unknown kernel %q (known: %s)", n.Name, roleList())
		case dup:
			c.errorf(n.Pos, "duplicate kernel %s (first at %s)", n.Name, c.pos(p))
		default:
			first[r] = n.Pos
			out = append(out, ir.KernelRef{Role: r, Pos: c.pos(n.Pos)})
		}
	}
	return out
}

// list returns the arguments of l; a missing list has none.
func (l *argList) list() []*argAST {
	if l == nil {
		return nil
	}
	return l.Args
}

// kwargs checks that args are name = value pairs with names from known and
// no name twice, and returns them by name. When it reports an error it
// returns ok = false, and callers skip their "missing argument" errors.
func (c *checker) kwargs(what string, args []*argAST, known ...string) (out map[string]*argAST, ok bool) {
	out, ok = map[string]*argAST{}, true
	first := map[string]lexer.Position{}
	for _, a := range args {
		if a == nil || a.Val == nil {
			continue
		}
		if a.Key == nil {
			c.errorf(a.Pos, "%s expects named arguments (%s)", what, strings.Join(known, ", "))
			ok = false
			continue
		}
		k := *a.Key
		isKnown := false
		for _, n := range known {
			isKnown = isKnown || n == k
		}
		if !isKnown {
			c.errorf(a.Pos, "unknown argument %q in %s (known: %s)", k, what, strings.Join(known, ", "))
			ok = false
			continue
		}
		if p, dup := first[k]; dup {
			c.errorf(a.Pos, "duplicate argument %s (first at %s)", k, c.pos(p))
			ok = false
			continue
		}
		first[k] = a.Pos
		out[k] = a
	}
	return out, ok
}

// text is the source spelling of x.
func (x *valueAST) text() string {
	s := ""
	if x.Neg {
		s = "-"
	}
	switch {
	case x.Int != nil:
		return s + *x.Int
	case x.Float != nil:
		return s + *x.Float
	case x.Word != nil:
		return *x.Word
	}
	return s
}

// intVal returns x as an integer; what names the value in errors.
func (c *checker) intVal(x *valueAST, what string) (int, bool) {
	if x.Int == nil {
		c.errorf(x.Pos, "%s must be an integer, got %s", what, x.text())
		return 0, false
	}
	n, ok := c.parseInt(x.Pos, x.text())
	return int(n), ok
}

// limitInt is posInt for values the kernels serve up to limit.
func (c *checker) limitInt(x *valueAST, what string, limit int) (int, bool) {
	n, ok := c.posInt(x, what)
	if ok && n > limit {
		c.errorf(x.Pos, "%s %d is larger than the kernels serve: at most %d", what, n, limit)
		return 0, false
	}
	return n, ok
}

// posInt is intVal for values that must be positive.
func (c *checker) posInt(x *valueAST, what string) (int, bool) {
	n, ok := c.intVal(x, what)
	if ok && n <= 0 {
		c.errorf(x.Pos, "%s must be positive, got %d", what, n)
		return 0, false
	}
	return n, ok
}

// floatVal returns x, an integer or a float, as a float.
func (c *checker) floatVal(x *valueAST, what string) (float64, bool) {
	var f float64
	var ok bool
	switch {
	case x.Int != nil:
		var n int64
		n, ok = c.parseInt(x.Pos, x.text())
		f = float64(n)
	case x.Float != nil:
		f, ok = c.parseFloat(x.Pos, x.text())
	default:
		c.errorf(x.Pos, "%s must be a number, got %s", what, x.text())
	}
	return f, ok
}

// wordVal returns x, which must be a name.
func (c *checker) wordVal(x *valueAST, what string) (string, bool) {
	if x.Word == nil {
		c.errorf(x.Pos, "%s must be a name, got %s", what, x.text())
		return "", false
	}
	return *x.Word, true
}

// parseInt parses an integer literal with an optional minus sign, which
// must fit in an i32.
func (c *checker) parseInt(p lexer.Position, s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		c.errorf(p, "integer %s is out of range for i32", s)
		return 0, false
	}
	return n, true
}

// parseFloat parses a float literal with an optional minus sign, which must
// fit in an f32.
func (c *checker) parseFloat(p lexer.Position, s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.Abs(f) > math.MaxFloat32 {
		c.errorf(p, "number %s is out of range for f32", s)
		return 0, false
	}
	return f, true
}

// closest returns the word of known nearest to w by edit distance when it
// is a likely misspelling (at most two edits, fewer than w's length), or "".
func closest(w string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(w), k); d < bestD && d < len(w) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// MaxParams bounds the param lines of a variant, MaxParamDims the
// dimensions of one param.
const (
	MaxParams    = 8
	MaxParamDims = 4
)

// reservedArgs are the names of kernel arguments (and scalars the kernels
// define) that a param or a named dim may not take: they share the C
// argument lists.
var reservedArgs = []string{
	"q", "qo_indptr", "k_pages", "v_pages", "num_pages", "kv_indptr", "kv_indices", "kv_last_page_len",
	"block_table", "max_blocks", "kv_lens", "batch_size", "o", "lse", "tree_order", "tree_order_indptr",
	"custom_mask", "mask_indptr", "mask_bytes", "q_rope_position", "k_rope_pos_offset", "k_scale", "v_scale", "sinks",
	"v", "s", "v_other", "s_other", "n", "k", "position_map", "src_page", "dst_page", "length",
	"q_nope", "q_pe", "ckv_pages", "kpe_pages", "ckv", "kpe", "rope_cos", "rope_sin", "rope_positions", "rope_factors",
	"q_norm_weight", "k_norm_weight", "qkv", "positions", "q_out", "kv_token_indptr", "copy_indptr", "copy_src",
	"copy_dst", "k_out", "v_out", "ckv_out", "kpe_out", "page_ids", "k_buf", "v_buf", "ckv_buf", "kpe_buf",
	"total_q", "total_kv", "splits", "part_o", "part_lse", "plan_splits", "threads", "items",
	// expression names and functions
	"q_pos", "kv_pos", "head", "score", "qo_heads", "kv_heads", "batch",
	"min", "max", "abs", "tanh", "exp", "log", "sqrt", "softcap", "alibi_slope", "expr",
}

// cKeywords are C and C++ keywords and names the generated code defines,
// which a param or dim name cannot be.
var cKeywords = []string{
	"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
	"float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
	"sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
	"bool", "true", "false", "class", "delete", "new", "namespace", "template", "this", "private", "public",
	"protected", "operator", "virtual", "friend", "using", "try", "catch", "throw", "typename", "nullptr",
	"main", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "half", "NULL",
}

// argName checks a name a param or a named dim gives a kernel argument.
func (c *checker) argName(p lexer.Position, what, name string) bool {
	switch {
	case slices.Contains(reservedArgs, name):
		c.errorf(p, "%s name %q is taken: it names a kernel argument or an expression name", what, name)
	case slices.Contains(cKeywords, name) || strings.HasPrefix(name, "__") || strings.HasPrefix(name, "attnc"):
		c.errorf(p, "%s name %q is reserved in the generated C/CUDA code", what, name)
	case len(name) > ir.MaxNameLen:
		c.errorf(p, "%s name is %d characters long; the limit is %d", what, len(name), ir.MaxNameLen)
	default:
		return true
	}
	return false
}

// params checks the param lines: `param NAME DTYPE[DIM, ...]`, DTYPE f32
// or i32, each DIM a positive integer literal, qo_heads, kv_heads, batch
// or a new name (an i32 argument).
func (c *checker) params(ps []*paramStmt, v *ir.Variant) []*ir.ParamDecl {
	var out []*ir.ParamDecl
	c.badParams = map[string]bool{}
	first := map[string]lexer.Position{}
	for i, s := range ps {
		if s == nil || s.Name == nil || s.DType == nil {
			continue
		}
		if i == MaxParams {
			c.errorf(s.Pos, "more than %d param lines; the limit is %d", MaxParams, MaxParams)
		}
		ok := c.argName(s.Name.Pos, "param", s.Name.Name)
		if p, dup := first[s.Name.Name]; dup {
			c.errorf(s.Name.Pos, "duplicate param %s (first at %s)", s.Name.Name, c.pos(p))
			ok = false
		} else {
			first[s.Name.Name] = s.Name.Pos
		}
		d := &ir.ParamDecl{Name: s.Name.Name, Pos: c.pos(s.Pos)}
		switch s.DType.Name {
		case "f32":
			d.T = ir.F32
		case "i32":
			d.T = ir.I32
		default:
			c.errorf(s.DType.Pos, "param dtype must be f32 or i32, got %q", s.DType.Name)
			ok = false
		}
		if len(s.Dims) == 0 {
			c.errorf(s.DType.Pos, "param %s needs at least one dimension (%s %s[DIM, ...])", s.Name.Name, s.Name.Name, s.DType.Name)
			ok = false
		}
		if len(s.Dims) > MaxParamDims {
			c.errorf(s.Dims[MaxParamDims].Pos, "param %s has %d dimensions; the limit is %d", s.Name.Name, len(s.Dims), MaxParamDims)
			ok = false
		}
		for _, dim := range s.Dims {
			if dim == nil {
				ok = false
				continue
			}
			switch {
			case dim.Int != nil:
				n, good := c.parseInt(dim.Pos, *dim.Int)
				if good && n < 1 {
					c.errorf(dim.Pos, "param dimension must be at least 1, got %d", n)
					good = false
				}
				ok = ok && good
				d.Dims = append(d.Dims, ir.ParamDim{Size: int(n)})
			case dim.Name != nil:
				pd := ir.ParamDim{Name: *dim.Name}
				switch {
				case !pd.Runtime():
				case first[pd.Name] != (lexer.Position{}) || findParam(out, pd.Name) != nil:
					c.errorf(dim.Pos, "param dimension %s is the name of a param", pd.Name)
					ok = false
				case !c.argName(dim.Pos, "param dimension", pd.Name):
					ok = false
				}
				d.Dims = append(d.Dims, pd)
			}
		}
		if ok {
			out = append(out, d)
		} else {
			c.badParams[d.Name] = true
		}
	}
	// A named dim declared after a param of its name is caught above; a
	// param declared after a dim of its name is caught here.
	for _, d := range out {
		for _, n := range v.ParamDimNamesOf(out) {
			if d.Name == n {
				c.errorf(lexer.Position{Filename: c.file, Line: d.Pos.Line, Column: d.Pos.Col}, "param %s has the name of a param dimension", d.Name)
			}
		}
	}
	return out
}

// paramsRead reports every param that no mask or score expression reads:
// it would be an argument of no kernel.
func (c *checker) paramsRead(ps []*paramStmt, v *ir.Variant) {
	read := map[string]bool{}
	mark := func(e ir.Expr) {
		if e != nil {
			ir.VisitExpr(e, func(x ir.Expr) {
				if r, ok := x.(*ir.ParamRead); ok {
					read[r.Name] = true
				}
			})
		}
	}
	for _, m := range v.Masks {
		mark(m.Expr)
	}
	mark(v.Score)
	for _, s := range ps {
		if s != nil && s.Name != nil && v.Param(s.Name.Name) != nil && !read[s.Name.Name] {
			c.errorf(s.Name.Pos, "param %s is never read: index it in mask expr(...) or score", s.Name.Name)
		}
	}
}
