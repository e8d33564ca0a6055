package llvm

import (
	"fmt"
	"math"

	"github.com/attnc/attnc/ir"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// parallel outlines the body of a parallel For into
// `void @<kernel>.par<N>(i8* ctx, i32 idx, i8* scratch)` (BodyType) and
// calls the runtime's ParallelFor with n = hi - lo, the byte size of
// the body's heap arrays, which live at fixed offsets in scratch (one
// block per worker thread), and the loop's run (ir.For.Run, at least 1).
// The free variables of the body are read at loop start and passed
// through a context struct {lo, captures...} that lives in the caller's
// frame. When the pool cannot allocate the workers'
// scratch it runs no item, and the kernel frees what it malloc'd and
// returns NO_MEMORY.
func (f *fnState) parallel(s *ir.For, lo, hi value.Value) {
	if f.par {
		f.fail("parallel loop %s nested inside a parallel loop", s.Var)
	}
	if f.e.pool == nil {
		f.fail("parallel loop %s: the target's runtime has no thread pool", s.Var)
	}
	kf := f.kf
	name := fmt.Sprintf("%s.par%d", kf.k.Name, kf.nPar)
	kf.nPar++
	f.e.reserve(name)

	// Captures: lo first, then the free variables of the body. Constants
	// are not passed through the context but rebound as constants, so the
	// body still sees e.g. constant trip counts.
	type capture struct {
		name  string
		b     *binding // nil for lo
		v     value.Value
		field int // index in the context struct; -1 for a constant
	}
	caps := []*capture{{name: s.Var + ".lo", v: lo}}
	for _, n := range freeVars(s) {
		b := f.lookup(n)
		if b == nil {
			f.fail("parallel loop %s: undefined name %q", s.Var, n)
		}
		v := b.v
		if b.kind == bindVar {
			v = f.cur.NewLoad(f.e.valueType(b.t, n), b.v)
		}
		caps = append(caps, &capture{name: n, b: b, v: v})
	}
	var fields []types.Type
	for _, c := range caps {
		c.field = -1
		if _, ok := c.v.(constant.Constant); !ok {
			c.field = len(fields)
			fields = append(fields, c.v.Type())
		}
	}
	st := types.NewStruct(fields...)
	var ctxp value.Value = constant.NewNull(i8p)
	if len(fields) > 0 {
		ctx := f.alloca(st, nil, name+".ctx")
		for _, c := range caps {
			if c.field >= 0 {
				p := f.cur.NewGetElementPtr(st, ctx, constant.NewInt(types.I32, 0), constant.NewInt(types.I32, int64(c.field)))
				f.cur.NewStore(c.v, p)
			}
		}
		ctxp = f.cur.NewBitCast(ctx, i8p)
	}
	n := f.cur.NewSub(hi, lo)
	heap, heapOff, heapBytes := HeapLayout(s)

	pctx := lir.NewParam("ctx", i8p)
	pidx := lir.NewParam("idx", types.I32)
	pscr := lir.NewParam("scratch", i8p)
	pscr.Attrs = append(pscr.Attrs, enum.ParamAttrNoAlias)
	fn := lir.NewFunc(name, types.Void, pctx, pidx, pscr)
	fn.Parent = f.e.mod
	fn.Linkage = enum.LinkageInternal
	fn.FuncAttrs = append(fn.FuncAttrs, enum.FuncAttrNoUnwind)
	fn.FuncAttrs = append(fn.FuncAttrs, f.e.attrs(kf.k)...)
	kf.outlined = append(kf.outlined, fn)
	if heapBytes > MaxHeapBytes {
		f.fail("parallel loop %s: %d bytes of heap arrays per worker, more than %d", s.Var, heapBytes, int64(MaxHeapBytes))
	}
	run := max(s.Run, 1)
	if run > math.MaxInt32 {
		f.fail("parallel loop %s: run %d does not fit in i32", s.Var, s.Run)
	}
	pst := f.cur.NewCall(f.e.pool, n, fn, ctxp, constant.NewInt(types.I64, heapBytes), constant.NewInt(types.I32, int64(run)))
	pst.SetName(f.fresh(name + ".status"))
	failed := f.cur.NewICmp(enum.IPredNE, pst, constant.NewInt(types.I32, 0))
	nomem := f.newBlock(name + ".nomem")
	cont := f.newBlock(name + ".done")
	f.cur.NewCondBr(failed, nomem, cont)
	f.place(nomem)
	f.failNoMemory()
	f.place(cont)

	// With heap arrays or captured buffers, fn only carves the arrays out
	// of scratch, loads the buffers' pointers from the context and calls
	// the body, which takes each as a noalias parameter: inlined back into
	// fn (alwaysinline), that becomes alias-scope metadata, so the
	// optimizer knows the arrays and buffers alias neither each other nor
	// anything else, as it knows of allocas and of the kernel's own
	// noalias parameters. The captured buffers are distinct objects: the
	// kernel's buffer parameters (noalias themselves), its mallocs and its
	// stack arrays. Loaded from the context in the body, their pointers
	// were unknown objects, and the loop vectorizer checked each loop
	// that reads one and writes another for overlap at run time (and kept
	// a scalar copy of the loop for when they did).
	var bufCaps []*capture
	for _, c := range caps {
		if c.b != nil && c.b.kind == bindBuf && c.field >= 0 {
			bufCaps = append(bufCaps, c)
		}
	}
	body := fn
	heapArg := map[*ir.Alloc]value.Value{}
	bufArg := map[*capture]value.Value{}
	if len(heap) > 0 || len(bufCaps) > 0 {
		bname := name + ".body"
		f.e.reserve(bname)
		w := fn.NewBlock("entry")
		params := []*lir.Param{lir.NewParam("ctx", i8p), lir.NewParam("idx", types.I32)}
		args := []value.Value{pctx, pidx}
		if len(bufCaps) > 0 {
			wsp := w.NewBitCast(pctx, types.NewPointer(st))
			for i, c := range bufCaps {
				p := w.NewGetElementPtr(st, wsp, constant.NewInt(types.I32, 0), constant.NewInt(types.I32, int64(c.field)))
				pname := fmt.Sprintf("buf%d.%s", i, c.name)
				ld := w.NewLoad(fields[c.field], p)
				ld.SetName(pname)
				args = append(args, ld)
				bp := lir.NewParam(pname, fields[c.field])
				bp.Attrs = append(bp.Attrs, enum.ParamAttrNoAlias)
				params = append(params, bp)
				bufArg[c] = bp
			}
		}
		for i, a := range heap {
			pt := types.NewPointer(f.e.valueType(storageType(a.T), "alloc "+a.Name))
			p := w.NewGetElementPtr(types.I8, pscr, constant.NewInt(types.I64, heapOff[a]))
			p.InBounds = true
			args = append(args, w.NewBitCast(p, pt))
			bp := lir.NewParam(fmt.Sprintf("heap%d.%s", i, a.Name), pt)
			bp.Attrs = append(bp.Attrs, enum.ParamAttrNoAlias)
			params = append(params, bp)
			heapArg[a] = bp
		}
		body = lir.NewFunc(bname, types.Void, params...)
		body.Parent = f.e.mod
		body.Linkage = enum.LinkageInternal
		body.FuncAttrs = append(body.FuncAttrs, enum.FuncAttrNoUnwind, enum.FuncAttrAlwaysInline)
		body.FuncAttrs = append(body.FuncAttrs, f.e.attrs(kf.k)...)
		kf.outlined = append(kf.outlined, body)
		w.NewCall(body, args...)
		w.NewRet(nil)
		pctx, pidx = params[0], params[1]
	}

	g := newFnState(f.e, kf, body, fmt.Sprintf("%s: parallel loop %s", f.what, s.Var))
	g.par = true
	g.fast = f.fast
	for _, p := range body.Params {
		g.names[p.Name()] = true
	}
	g.heapArg = heapArg
	g.start()
	var sp value.Value
	if len(fields) > len(bufArg) {
		sp = g.cur.NewBitCast(pctx, types.NewPointer(st))
	}
	scope := g.push()
	var glo value.Value
	for _, c := range caps {
		v := c.v
		if bp, ok := bufArg[c]; ok {
			v = bp
		} else if c.field >= 0 {
			p := g.cur.NewGetElementPtr(st, sp, constant.NewInt(types.I32, 0), constant.NewInt(types.I32, int64(c.field)))
			ld := g.cur.NewLoad(fields[c.field], p)
			ld.SetName(g.fresh(c.name))
			v = ld
		}
		if c.b == nil {
			glo = v
			continue
		}
		b := &binding{kind: bindValue, t: c.b.t, v: v, outer: true}
		if c.b.kind == bindBuf {
			b.kind = bindBuf
			b.param = c.b.param
		}
		scope[c.name] = b
	}
	iv := g.cur.NewAdd(glo, pidx)
	iv.SetName(g.fresh(s.Var))
	g.bind(s.Var, &binding{kind: bindValue, t: ir.I32, v: iv})
	g.loops = []*loopCtx{{}}
	g.fast = f.fast
	g.block(s.Body, false)
	if g.cur != nil {
		g.cur.NewRet(nil)
	}
}

// MaxHeapBytes bounds the heap arrays of one parallel loop's body (per
// worker), so that a pool allocating every worker's block at once (up to
// 2^23 workers) does not overflow an i64.
const MaxHeapBytes = 1 << 40

// HeapAlign is the alignment of each heap array in a worker's scratch (a
// cache line, so arrays of different work items never share one).
const HeapAlign = 64

// HeapLayout places the heap arrays (ir.Alloc with Heap) of parallel loop
// s's body in one scratch block: the arrays in order, each one's byte
// offset, and the block's size (0 when the body has none).
func HeapLayout(s *ir.For) ([]*ir.Alloc, map[*ir.Alloc]int64, int64) {
	var heap []*ir.Alloc
	off := map[*ir.Alloc]int64{}
	var size int64
	ir.MapStmts(s.Body, func(st ir.Stmt) []ir.Stmt {
		if a, ok := st.(*ir.Alloc); ok && a.Heap {
			heap = append(heap, a)
			off[a] = size
			size += (int64(a.Size)*int64(elemBytes(storageType(a.T))) + HeapAlign - 1) &^ (HeapAlign - 1)
		}
		return []ir.Stmt{st}
	})
	return heap, off, size
}

// freeVars lists, in order of first use, the names the body of a parallel
// loop reads or writes that it does not declare itself.
func freeVars(s *ir.For) []string {
	w := &fvWalker{seen: map[string]bool{}}
	w.scopes = []map[string]bool{{s.Var: true}}
	w.stmts(s.Body)
	return w.out
}

type fvWalker struct {
	scopes []map[string]bool
	seen   map[string]bool
	out    []string
}

func (w *fvWalker) declared(n string) bool {
	for i := len(w.scopes) - 1; i >= 0; i-- {
		if w.scopes[i][n] {
			return true
		}
	}
	return false
}

func (w *fvWalker) use(n string) {
	if !w.declared(n) && !w.seen[n] {
		w.seen[n] = true
		w.out = append(w.out, n)
	}
}

func (w *fvWalker) declare(n string) { w.scopes[len(w.scopes)-1][n] = true }

func (w *fvWalker) expr(e ir.Expr) {
	if e == nil {
		return
	}
	ir.VisitExpr(e, func(x ir.Expr) {
		switch x := x.(type) {
		case *ir.Ref:
			w.use(x.Name)
		case *ir.Load:
			w.use(x.Buf)
		case *ir.NotNull:
			w.use(x.Buf)
		}
	})
}

func (w *fvWalker) stmts(b *ir.Block) {
	if b == nil {
		return
	}
	for _, s := range b.Stmts {
		w.stmt(s)
	}
}

func (w *fvWalker) scoped(b *ir.Block, decl string) {
	w.scopes = append(w.scopes, map[string]bool{})
	if decl != "" {
		w.declare(decl)
	}
	w.stmts(b)
	w.scopes = w.scopes[:len(w.scopes)-1]
}

func (w *fvWalker) stmt(s ir.Stmt) {
	switch s := s.(type) {
	case *ir.Block:
		w.scoped(s, "")
	case *ir.Let:
		w.expr(s.Value)
		w.declare(s.Name)
	case *ir.Var:
		w.expr(s.Init)
		w.declare(s.Name)
	case *ir.Assign:
		w.use(s.Name)
		w.expr(s.Value)
	case *ir.Alloc:
		w.declare(s.Name)
	case *ir.Malloc:
		w.expr(s.Size)
		w.declare(s.Name)
	case *ir.Free:
		w.use(s.Name)
	case *ir.Store:
		w.use(s.Buf)
		w.expr(s.Index)
		w.expr(s.Value)
	case *ir.Prefetch:
		w.use(s.Buf)
		w.expr(s.Index)
	case *ir.For:
		w.expr(s.Lo)
		w.expr(s.Hi)
		w.scoped(s.Body, s.Var)
	case *ir.If:
		w.expr(s.Cond)
		w.scoped(s.Then, "")
		w.scoped(s.Else, "")
	case *ir.Return:
		w.expr(s.Value)
	case *ir.CallStmt:
		for _, a := range s.Args {
			w.expr(a)
		}
		if s.Result != "" {
			w.declare(s.Result)
		}
	}
}
