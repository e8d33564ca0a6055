package cpu

import (
	"fmt"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// FiniteCodes gives the decode products that read 8-bit K or V codes in
// place (a matmul whose B rows are at offsets, BRows: DecodeDirect) a
// path without the NaN handling of the codes' widening, in the clones
// whose level converts half natively (where native-widen widens through
// the half bits and a dtype's FiniteHalfWiden drops that handling: e4m3,
// whose NaN select costs about as much as the rest of its widening). The
// matmul becomes
//
//	check: max over B's rows (< the row extent) of (code & NaNMask)
//	if check != NaNMask @finite { matmul } else { matmul }
//
// The check reads each row's bytes once as vectors of the level's width
// (a masked unsigned max per vector, a shuffle tree at the end), the bytes
// the product reads next; a tile with a NaN code anywhere in its rows
// takes the exact path, so NaN propagates as before. Native-widen widens
// the Then branch's loads with FiniteHalfWiden — or, at the AVX-512
// levels, FiniteBitsWiden (bitsWiden), whose subnormal codes are f32
// subnormals: there the check also asks rt.fp_daz, and a thread that
// reads denormals as zero takes the exact path; both branches compute the
// same bits wherever the check passes.
func (mc *Machine) FiniteCodes(m *ir.Module) (*ir.Module, error) {
	return mc.mapClones(m, "finite-codes", func(k *ir.Kernel, l *Level) *ir.Kernel {
		if !l.NativeF16 || l.Lanes < 2 {
			return k
		}
		elems := passes.ElemTypes(k)
		n := 0
		c := *k
		c.Body = ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			mm, ok := s.(*ir.MatMul)
			if !ok || mm.BRows == "" {
				return []ir.Stmt{s}
			}
			r := ir.StorageOf(elems[mm.B])
			if r == nil || r.FiniteHalfWiden == nil || r.Carrier != ir.U8 {
				return []ir.Stmt{s}
			}
			rows, width := mm.KExt, mm.N
			if mm.TransB {
				rows, width = mm.NExt, mm.K
			}
			// One vector register of bytes, or the widest power of two
			// that divides a row.
			V := 4 * l.Lanes
			for V > 1 && width%V != 0 {
				V /= 2
			}
			if V < 2 {
				return []ir.Stmt{s}
			}
			n++
			check := codeCheck(fmt.Sprintf("fc%d", n), mm.B, mm.BRows, rows, width, V, r.NaNMask)
			cond := ir.Bin(ir.Ne, ir.R(fmt.Sprintf("fc%d", n), ir.U8), ir.IntT(ir.U8, r.NaNMask))
			if bitsWiden(elems[mm.B], *l) {
				// The finite branch widens through f32 subnormals:
				// only where this thread does not read them as zero.
				daz := fmt.Sprintf("fc%d_daz", n)
				check = append(check, &ir.CallStmt{Result: daz, Fn: "rt.fp_daz"})
				cond = ir.Bin(ir.And, cond, ir.Bin(ir.Eq, ir.R(daz, ir.I32), ir.Int(0)))
			}
			fast, exact := *mm, *mm
			return append(check, &ir.If{
				Cond: cond,
				Then: &ir.Block{Stmts: []ir.Stmt{&fast}},
				Else: &ir.Block{Stmts: []ir.Stmt{&exact}},
				Tag:  ir.TagFinite,
			})
		})
		return &c
	})
}

// codeCheck binds name (u8) to the largest code & mask over rows [0,
// nrows) of pool, row r at offset rowsArr[r], each width codes read as
// vectors of V bytes: mask exactly when some code has every bit of mask
// set.
func codeCheck(name, pool, rowsArr string, nrows ir.Expr, width, V int, mask int64) []ir.Stmt {
	vt := ir.Vec(ir.U8, V)
	acc := name + "_vacc"
	row := name + "_o"
	m := &ir.Const{T: vt, Int: mask}
	var val ir.Expr
	for c := 0; c < width/V; c++ {
		idx := ir.Bin(ir.Add, ir.R(row, ir.I64), ir.IntT(ir.I64, int64(c*V)))
		x := ir.Bin(ir.And, &ir.Load{Buf: pool, Index: idx, T: vt}, m)
		if val == nil {
			val = x
		} else {
			val = ir.Bin(ir.Max, val, x)
		}
	}
	out := []ir.Stmt{
		&ir.Var{Name: acc, Init: &ir.Const{T: vt}},
		&ir.For{Var: name + "_r", Lo: i32c(0), Hi: nrows, Kind: ir.Serial, Body: &ir.Block{Stmts: []ir.Stmt{
			&ir.Let{Name: row, Value: ir.Ld(rowsArr, ir.I64, ir.R(name+"_r", ir.I32))},
			&ir.Assign{Name: acc, Value: ir.Bin(ir.Max, ir.R(acc, vt), val)},
		}}},
	}
	var cur ir.Expr = ir.R(acc, vt)
	for n, step := V, 0; n > 1; n, step = n/2, step+1 {
		lo, hi := make([]int, n/2), make([]int, n/2)
		for i := range lo {
			lo[i], hi[i] = i, n/2+i
		}
		h := fmt.Sprintf("%s_h%d", name, step)
		out = append(out, &ir.Let{Name: h, Value: ir.Bin(ir.Max, &ir.VShuffle{X: cur, Y: cur, Mask: lo}, &ir.VShuffle{X: cur, Y: cur, Mask: hi})})
		cur = ir.R(h, ir.Vec(ir.U8, n/2))
	}
	return append(out, &ir.Let{Name: name, Value: cur})
}
