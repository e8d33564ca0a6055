package cpu

import (
	"strings"

	"github.com/attnc/attnc/ir"
)

// NativeWiden widens the storage-only loads of a clone whose CPU level
// converts IEEE half natively (F16C on x86-64-v3 and -v4, NEON) with the
// dtype table's hardware conversion (HalfWiden: one vcvtph2ps per vector
// of K or V instead of a dozen integer operations): f16 bits as they are,
// e5m2 codes as the f16 whose top byte they are, e4m3 codes as the f16 of
// their value / 2^8 times 2^8 (exact; NaN codes selected in the half
// bits). The other loads (bf16; i8, whose integer Widen is one sitofp),
// and the clones of the other levels, keep the exact integer Widen that
// legalize-dtype writes. It runs before legalize-dtype, which leaves the
// loads of carrier bits it writes alone. In the Then branch of an if
// tagged finite (finite-codes: the codes there hold no NaN) it widens
// with the table's FiniteHalfWiden where a dtype has one.
func (mc *Machine) NativeWiden(m *ir.Module) (*ir.Module, error) {
	return mc.mapClones(m, "native-widen", func(k *ir.Kernel, l *Level) *ir.Kernel {
		if !l.NativeF16 {
			return k
		}
		c := *k
		// The Then branches of finite-codes' ifs first: codes there hold
		// no NaN.
		body := ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
			if x, ok := s.(*ir.If); ok && x.Tag == ir.TagFinite {
				f := *x
				f.Then = ir.MapExprs(x.Then, halfWiden(true, *l))
				return []ir.Stmt{&f}
			}
			return []ir.Stmt{s}
		})
		c.Body = ir.MapExprs(body, halfWiden(false, *l))
		return &c
	})
}

// halfWiden rewrites a widening load of a storage type with the table's
// HalfWiden, or, finite (the codes hold no NaN), its FiniteBitsWiden where
// level l widens the type with it (bitsWiden), else its FiniteHalfWiden
// where it has one.
func halfWiden(finite bool, l Level) func(ir.Expr) ir.Expr {
	return func(e ir.Expr) ir.Expr {
		if f := foldHalfScale(e); f != e {
			// A folded product's load (codescale.go): the half
			// value, its scale moved out of the loop.
			return f
		}
		cv, ok := e.(*ir.Convert)
		if !ok || cv.To.Elem() != ir.F32 {
			return e
		}
		ld, ok := cv.X.(*ir.Load)
		if !ok || !ld.T.Elem().IsStorageOnly() {
			return e
		}
		r := ir.StorageOf(ld.T.Elem())
		if r == nil || r.HalfWiden == nil {
			return e
		}
		w := r.HalfWiden
		if finite && r.FiniteHalfWiden != nil {
			w = r.FiniteHalfWiden
		}
		bits := &ir.Load{Buf: ld.Buf, Index: ld.Index, T: ir.Vec(r.Carrier, ld.T.Lanes())}
		if finite && bitsWiden(ld.T.Elem(), l) {
			return ir.Lanewise(r.FiniteBitsWiden, bits)
		}
		return ir.Cvt(cv.To, ir.Lanewise(w, bits))
	}
}

// finiteBits turns bitsWiden on; tests compare against it off.
var finiteBits = true

// bitsWiden reports whether level l widens storage type t's codes in a
// finite-codes branch (no NaN codes there) with the table's
// FiniteBitsWiden — shifts and a mask into f32 bits, no conversion —
// rather than through the half bits: x86-64's AVX-512 levels (16 lanes,
// where rt.fp_daz exists), e4m3.
// There the half path takes 6 operations per 32 codes, 2 of them
// vcvtph2ps and one a 256-bit extract, the bits path 3 per 16 (a sign
// extension from memory, a shift, a mask), which a C model of decode's
// Q·Kᵀ dot blocks (4 rows by 4 heads, head dim 128, in cache) ran in 6.4
// ns per row against 7.35 on Zen 5 (i8's sitofp: 6.0). Its f32 values
// are value / 2^120, subnormal for e4m3's subnormal codes (no slower
// there in the same model): codescale.go folds the 2^120 out of the
// products as it does the half path's 2^8, and finite-codes sends a tile
// to the exact path when the thread reads denormals as zero (rt.fp_daz:
// MXCSR's DAZ, which a caller may set), so the values stay exact. e5m2
// has no FiniteBitsWiden: its half path has no NaN select to drop (5
// operations per 32 codes), and the same f32-bits path (<< 21, a check on
// its infinity and NaN codes) took 7–16% more time in cache on Zen 5
// (docs/benchmarks.md, Machine A session 31).
func bitsWiden(t ir.Type, l Level) bool {
	if !finiteBits || !l.NativeF16 || l.Lanes < 16 || !strings.HasPrefix(l.CPU, "x86-64") || !t.IsStorageOnly() {
		return false
	}
	r := ir.StorageOf(t)
	return r != nil && r.FiniteBitsWiden != nil && r.FiniteHalfWiden != nil
}

// pairCodes turns pairWiden on; tests compare against it off.
var pairCodes = true

// pairWiden reports whether the products of level l read storage type t
// two vectors at a time (widenPair): 8-bit codes that native-widen widens
// through the half bits (HalfWiden: e4m3, e5m2). Their integer steps
// (sign extension to 16 bits, shift, mask) then run once on 2L codes,
// a register of words at the level's width, and only the conversions
// (vcvtph2ps) run per vector of L: at x86-64-v4, e4m3 costs 6
// instructions per 32 codes instead of 8, at x86-64-v3 6 per 16 instead
// of 8. The pair's values are those of two loads of L codes, bit for
// bit.
func pairWiden(t ir.Type, l Level) bool {
	if !pairCodes || !l.NativeF16 || !codes(t) {
		return false
	}
	r := ir.StorageOf(t)
	return r != nil && r.HalfWiden != nil
}

// widenPair binds names lo and hi to the f32 vectors of L lanes that
// loadScaled(b, elem, L, at, fold) and loadScaled(b, elem, L, at+L, fold)
// give, through one load of 2L elements: w (a 2L-lane f32 value) holds
// it, lo and hi are its halves.
func widenPair(w, lo, hi, b string, elem ir.Type, L int, at ir.Expr, fold float64) []ir.Stmt {
	wt := ir.Vec(ir.F32, 2*L)
	half := func(from int) []int {
		m := make([]int, L)
		for i := range m {
			m[i] = from + i
		}
		return m
	}
	return []ir.Stmt{
		&ir.Let{Name: w, Value: loadScaled(b, elem, 2*L, at, fold)},
		&ir.Let{Name: lo, Value: &ir.VShuffle{X: ir.R(w, wt), Y: ir.R(w, wt), Mask: half(0)}},
		&ir.Let{Name: hi, Value: &ir.VShuffle{X: ir.R(w, wt), Y: ir.R(w, wt), Mask: half(L)}},
	}
}
