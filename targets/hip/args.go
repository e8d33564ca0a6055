package hip

import (
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets/gpu/host"
)

// ArgsAtUse names the parameters of an attention kernel (one with a KV
// tile loop) that the printer reads from the kernel's argument segment
// where each is used (the prelude's ATTNC_ARG: one scalar load per use)
// rather than letting the compiler load every argument at the kernel's
// start and hold it in scalar registers through the tile loop: every
// buffer its KV tile loops do not mention, and every scalar. A wavefront
// has about 100 SGPRs (gfx942: s0–s101, VCC and the flat scratch and
// XNACK pairs counting against them), and an attention kernel's uniform
// values — table pointers, per-item bounds, LDS addresses, the exec masks
// of divergent branches (two SGPRs each on 64 lanes) — fill them: held
// arguments made the prefill and decode kernels with many table arguments,
// inline RoPE or the register accumulator spill SGPRs into VGPR lanes. The
// buffers the tile loop reads stay held (loaded once), their addresses
// being formed in its innermost loops; a scalar the tile loop reads
// (num_pages, in the page walk) costs a scalar load per use there, for one
// SGPR less across it. Other kernels are printed as they are.
func ArgsAtUse(k *ir.Kernel) map[string]bool {
	if !host.HasTileLoop(k) {
		return nil
	}
	inLoop := map[string]bool{}
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Tag == ir.TagKVTile {
			mentions(f, inLoop)
		}
		return []ir.Stmt{s}
	})
	out := map[string]bool{}
	for _, p := range k.Params {
		if !p.Buffer || !inLoop[p.Name] {
			out[p.Name] = true
		}
	}
	return out
}

// mentions adds every name loop f (its bounds and body) reads or writes to
// names: variables, buffers and arrays in expressions and statements.
func mentions(f *ir.For, names map[string]bool) {
	expr := func(e ir.Expr) ir.Expr {
		ir.VisitExpr(e, func(n ir.Expr) {
			switch x := n.(type) {
			case *ir.Ref:
				names[x.Name] = true
			case *ir.Load:
				names[x.Buf] = true
			case *ir.NotNull:
				names[x.Buf] = true
			}
		})
		return e
	}
	body := &ir.Block{Stmts: []ir.Stmt{f}}
	ir.MapStmtExprs(body, expr)
	ir.MapStmts(body, func(s ir.Stmt) []ir.Stmt {
		switch x := s.(type) {
		case *ir.Store:
			names[x.Buf] = true
		case *ir.Copy:
			names[x.Dst], names[x.Src] = true, true
		case *ir.LdMatrix:
			names[x.Src] = true
		case *ir.Prefetch:
			names[x.Buf] = true
		case *ir.Assign:
			names[x.Name] = true
		}
		return []ir.Stmt{s}
	})
}
