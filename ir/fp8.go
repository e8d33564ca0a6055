package ir

import (
	"fmt"
	"math"
	"sync"
)

// Exact conversions of the 8-bit KV codes (OCP FP8 E4M3 and E5M2, int8) as
// integer and f32 expressions, for the dtype table: branch-free bit
// manipulation that every backend computes the same and vectorizes (no
// per-element branch, no table). A code arrives and leaves as u8 bits.

// fp8Format is an OCP 8-bit float layout: mantissa bits and exponent bias.
// ieee says the all-ones exponent holds inf and NaN (E5M2); otherwise only
// the all-ones code magnitude 0x7f is NaN and there is no inf (E4M3).
type fp8Format struct {
	mant, bias int
	ieee       bool
	// maxBits is the f32 bit pattern of the largest finite magnitude,
	// minNormal that of the smallest normal one.
	maxBits, minNormal int64
	maxCode            int64
}

var (
	e4m3Format = fp8Format{mant: 3, bias: 7, maxBits: 0x43e00000, minNormal: 0x3c800000, maxCode: 0x7e}              // 448, 2^-6
	e5m2Format = fp8Format{mant: 2, bias: 15, ieee: true, maxBits: 0x47600000, minNormal: 0x38800000, maxCode: 0x7b} // 57344, 2^-14
)

func f32Bits(x Expr) Expr { return &Bitcast{To: I32, X: x} }
func bitsF32(u Expr) Expr { return &Bitcast{To: F32, X: u} }
func codeI32(c Expr) Expr { return Bin(And, Cvt(I32, c), c32(0xff)) }
func pow2(e int) float64  { return math.Ldexp(1, e) }

// widen converts fp8 bits c (u8) to f32 exactly, with no f32 subnormal on
// the way (as F16ToF32, so that DAZ and FTZ change nothing): the exponent
// and mantissa bits shifted into an f32's place get the exponent rebiased
// by an integer add (bias to 127), less 0 for a normal code; a subnormal
// code's mantissa m (and zero) is rebiased one step further, to 2^(1-bias)
// · (1 + m/2^mant), less 2^(1-bias): m · 2^(1-bias-mant), an exact f32
// subtraction of normal values with a normal result (or +0). NaN (and
// E5M2's inf) get the all-ones f32 exponent with the mantissa kept.
func (f fp8Format) widen(c Expr) Expr {
	ci := codeI32(c)
	sign := Bin(Shl, Bin(And, ci, c32(0x80)), c32(24))
	em := Bin(And, ci, c32(0x7f))
	shifted := Bin(Shl, em, c32(int64(23-f.mant)))
	small := Bin(Lt, em, c32(1<<f.mant))
	rebiased := bitsF32(Bin(Add, shifted, Sel(small, c32(int64(128-f.bias)<<23), c32(int64(127-f.bias)<<23))))
	finite := f32Bits(Bin(Sub, rebiased, Sel(small, Float(pow2(1-f.bias)), Float(0))))
	var mag Expr
	if f.ieee {
		mag = Sel(Bin(Ge, em, c32(0x7f&^(1<<f.mant-1))), Bin(Or, shifted, c32(0x7f800000)), finite)
	} else {
		mag = Sel(Bin(Eq, em, c32(0x7f)), c32(0x7fc00000), finite)
	}
	return bitsF32(Bin(Or, mag, sign))
}

// narrow converts f32 x to fp8 bits (u8): round to nearest even, saturated
// to the largest finite magnitude (infinities included), NaN to 0x7f with
// x's sign, -0 and negative values that round to zero keep the sign. Normal
// results round the f32 bits at the format's mantissa width (a carry into
// the exponent is the right result); subnormal ones add a float whose ulp
// is the format's smallest subnormal, so the f32 addition rounds (to
// nearest even) exactly where the format does.
func (f fp8Format) narrow(x Expr) Expr {
	u := f32Bits(x)
	sign := Bin(And, Bin(Shr, u, c32(24)), c32(0x80))
	a := Bin(And, u, c32(0x7fffffff))
	shift := int64(23 - f.mant)
	odd := Bin(And, Bin(Shr, a, c32(shift)), c32(1))
	normal := Bin(Sub, Bin(Shr, Bin(Add, Bin(Add, a, c32(1<<(shift-1)-1)), odd), c32(shift)), c32(int64(127-f.bias)<<f.mant))
	// The magic float 2^(24 - bias - mant) has an ulp of 2^(1 - bias -
	// mant), the smallest subnormal.
	magic := int64(127+24-f.bias-f.mant) << 23
	denorm := Bin(Sub, f32Bits(Bin(Add, bitsF32(a), bitsF32(c32(magic)))), c32(magic))
	mag := Sel(Bin(Ge, a, c32(f.maxBits)), c32(f.maxCode), Sel(Bin(Lt, a, c32(f.minNormal)), denorm, normal))
	nan := Bin(Gt, a, c32(0x7f800000))
	return Cvt(U8, Bin(Or, Sel(nan, c32(0x7f), mag), sign))
}

// QuotientCode is the code of 8-bit type code for the f32 quotient x / sc
// (append's quantizer): the dtype table's Narrow of x / sc, except that a
// NaN quotient of an fp8 type gets the NaN code 0x7f with the sign x86's
// division gives it: a NaN x's sign, else a NaN sc's, else negative (0/0
// and inf/inf: x86's default NaN). IEEE 754 leaves a NaN's sign open and
// targets differ (NVIDIA GPUs give a positive canonical NaN); spelling
// out x86's rule keeps the codes the CPU has always stored and makes
// every other target store the same.
func QuotientCode(code Type, x, sc Expr) Expr {
	q := Bin(Div, x, sc)
	if code != E4M3 && code != E5M2 {
		return Cvt(code, q)
	}
	xb, sb := f32Bits(x), f32Bits(sc)
	isNaN := func(b Expr) Expr { return Bin(Gt, Bin(And, b, c32(0x7fffffff)), c32(0x7f800000)) }
	signOf := func(b Expr) Expr { return Bin(And, b, c32(-1<<31)) }
	sign := Sel(isNaN(xb), signOf(xb), Sel(isNaN(sb), signOf(sb), c32(-1<<31)))
	// The quotient, a NaN replaced by the quiet NaN of that sign (a
	// select moves bits: no target rewrites them), narrowed.
	nan := bitsF32(Bin(Or, sign, c32(0x7fc00000)))
	return Cvt(code, Sel(Bin(Ne, q, q), nan, q))
}

// E4M3ToF32 widens OCP FP8 E4M3 bits (u8) to f32 exactly.
func E4M3ToF32(c Expr) Expr { return e4m3Format.widen(c) }

// F32ToE4M3 narrows f32 to OCP FP8 E4M3 bits (u8): nearest even,
// saturated to ±448, NaN to ±0x7f.
func F32ToE4M3(x Expr) Expr { return e4m3Format.narrow(x) }

// E5M2ToF32 widens OCP FP8 E5M2 bits (u8) to f32 exactly (inf and NaN
// included).
func E5M2ToF32(c Expr) Expr { return e5m2Format.widen(c) }

// F32ToE5M2 narrows f32 to OCP FP8 E5M2 bits (u8): nearest even,
// saturated to ±57344 (infinities too), NaN to ±0x7f.
func F32ToE5M2(x Expr) Expr { return e5m2Format.narrow(x) }

// E5M2HalfWiden widens E5M2 bits (u8) to f32 through the hardware half
// conversion: an E5M2 code is binary16's top byte (same exponent width and
// bias), so code << 8 is the f16 of the same value, subnormals, inf and
// NaN included.
func E5M2HalfWiden(c Expr) Expr {
	return halfBitsToF32(Bin(Shl, Cvt(I16, c), IntT(I16, 8)))
}

// E4M3HalfWiden widens E4M3 bits (u8) to f32 through the hardware half
// conversion: sign << 8 | (exponent and mantissa) << 7 is the f16 of the
// code's value / 2^8 (the exponent field moves into f16's unchanged, so
// the bias grows from 7 to 15; a subnormal's mantissa lands in f16's
// subnormals with the same 2^-8), which one exact f32 multiply by 2^8
// restores. The bits are (code << 8) >> 1, an arithmetic shift that
// copies the sign into bit 14, which is then cleared; the NaN codes
// S.1111.111 get f16's all-ones exponent first.
func E4M3HalfWiden(c Expr) Expr {
	h := Cvt(I16, c)
	bits := Bin(And, Bin(Shr, Bin(Shl, h, IntT(I16, 8)), IntT(I16, 1)), IntT(I16, -0x4001))
	nan := Sel(Bin(Eq, Bin(And, bits, IntT(I16, 0x3f80)), IntT(I16, 0x3f80)), IntT(I16, 0x7e00), IntT(I16, 0))
	return Bin(Mul, halfBitsToF32(Bin(Or, bits, nan)), Float(pow2(e5m2Format.bias-e4m3Format.bias)))
}

// E4M3FiniteHalfWiden is E4M3HalfWiden for codes that are not NaN (code
// & 0x7f != 0x7f): the same half bits without the NaN select. The code
// sign-extended to 16 bits and shifted left by 7 puts the exponent and
// mantissa where E4M3HalfWiden does and copies the sign into bits 15 and
// 14; bit 14 is cleared. A NaN code would give ±480: a caller uses it only
// where it has checked that the codes hold no NaN (CodeNaNMask).
func E4M3FiniteHalfWiden(c Expr) Expr {
	h := Cvt(I16, c)
	sext := Bin(Shr, Bin(Shl, h, IntT(I16, 8)), IntT(I16, 8))
	bits := Bin(And, Bin(Shl, sext, IntT(I16, 7)), IntT(I16, -0x4001))
	return Bin(Mul, halfBitsToF32(bits), Float(pow2(e5m2Format.bias-e4m3Format.bias)))
}

// E4M3FiniteBitsWiden is E4M3ToF32 for codes that are not NaN through
// integer operations alone, no conversion: the code sign-extended to 32
// bits and shifted left by 20 puts the exponent and mantissa in an f32's
// low exponent bits and top mantissa bits and copies the sign into bits
// 31 to 27; clearing bits 30 to 27 leaves the f32 of the code's value /
// 2^120 (the exponent field moves unchanged, so the bias grows from 7 to
// 127; a subnormal code is an f32 subnormal with the same 2^-120), which
// one exact f32 multiply by 2^120 restores (the largest value, 448 / 2^120,
// and the smallest, 2^-129, are exact). A NaN code would give a finite
// value: a caller uses it only where it has checked that the codes hold
// no NaN (NaNMask).
func E4M3FiniteBitsWiden(c Expr) Expr {
	sext := Bin(Sub, Bin(Xor, codeI32(c), c32(0x80)), c32(0x80))
	bits := Bin(And, Bin(Shl, sext, c32(20)), c32(-0x78000001))
	return Bin(Mul, bitsF32(bits), Float(pow2(127-e4m3Format.bias)))
}

// I8ToF32 widens int8 bits (u8, two's complement) to f32 exactly.
func I8ToF32(c Expr) Expr {
	return Cvt(F32, Bin(Sub, Bin(Xor, codeI32(c), c32(0x80)), c32(0x80)))
}

// F32ToI8 narrows f32 to int8 bits (u8): clamped to [-127, 127]
// (infinities too), rounded to nearest even, NaN to 0. Adding 1.5 * 2^23
// puts the integer part of any |x| <= 2^22 in the low mantissa bits of
// the sum, which the f32 addition rounds to nearest even; no float
// subtraction follows, so nothing can reassociate it away.
func F32ToI8(x Expr) Expr {
	u := f32Bits(x)
	nan := Bin(Gt, Bin(And, u, c32(0x7fffffff)), c32(0x7f800000))
	clamped := Sel(Bin(Gt, x, Float(127)), Float(127), Sel(Bin(Lt, x, Float(-127)), Float(-127), x))
	const magic = 0x4b400000 // 1.5 * 2^23
	n := Bin(Sub, f32Bits(Bin(Add, clamped, bitsF32(c32(magic)))), c32(magic))
	return Cvt(U8, Sel(nan, c32(0), n))
}

// codeValues caches, per 8-bit code type, the f32 value of each of its
// 256 codes: its Widen expression evaluated (the interpreter's semantics
// are the table's).
var codeValues sync.Map // Type -> *[256]float32

// codeValue is the value of code bits c of 8-bit code type t.
func codeValue(t Type, c uint8) float64 {
	if tab, ok := codeValues.Load(t); ok {
		return float64(tab.(*[256]float32)[c])
	}
	var tab [256]float32
	r := StorageOf(t)
	for i := range tab {
		x, err := EvalExpr(r.Widen(IntT(U8, int64(i))), nil)
		if err != nil {
			panic(interpError{fmt.Errorf("widen %s code %#x: %v", t, i, err)})
		}
		tab[i] = x.(float32)
	}
	codeValues.Store(t, &tab)
	return float64(tab[c])
}

// codeOf is the code bits of 8-bit code type t nearest to x (its Narrow
// expression evaluated).
func codeOf(t Type, x float32) uint8 {
	b, err := EvalExpr(StorageOf(t).Narrow(Float(float64(x))), nil)
	if err != nil {
		panic(interpError{fmt.Errorf("narrow %g to %s: %v", x, t, err)})
	}
	return b.(uint8)
}

// CodeToHalf converts the bits c (u8) of a HalfExact 8-bit code to the
// carrier bits (i16) of tensor-core dtype half, exactly. bf16: the top
// half of the code's f32 value (a bf16 value, so nothing is cut). f16:
// E5M2 is binary16's top byte, so its bits shifted up are the f16 bits;
// every other code's value is zero, NaN or an f16 normal (e4m3: 2^-9 ..
// 448; i8: 1 .. 128 in magnitude), whose f32 bits rebiased and shifted are
// the f16 bits, with no rounding step.
func CodeToHalf(code, half Type, c Expr) Expr {
	if half == BF16 {
		return Cvt(I16, Bin(Shr, f32Bits(StorageOf(code).Widen(c)), c32(16)))
	}
	if code == E5M2 {
		return Cvt(I16, Bin(Shl, codeI32(c), c32(8)))
	}
	u := f32Bits(StorageOf(code).Widen(c))
	a := Bin(And, u, c32(0x7fffffff))
	sign := Bin(And, Bin(Shr, u, c32(16)), c32(0x8000))
	normal := Bin(Sub, Bin(Shr, a, c32(13)), c32((127-15)<<10))
	mag := Sel(Bin(Eq, a, c32(0)), c32(0), Sel(Bin(Gt, a, c32(0x7f800000)), c32(0x7e00), normal))
	return Cvt(I16, Bin(Or, mag, sign))
}
