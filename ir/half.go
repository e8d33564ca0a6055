package ir

// Half-precision conversions as integer and f32 expressions: every backend
// computes the same bits without native half support. Lowering uses them
// for tensor-core operands, legalize-dtype for f16/bf16 buffers.

func c32(v int64) Expr { return Int(v) }

// bitsI32 zero-extends 16-bit pattern h to i32.
func bitsI32(h Expr) Expr {
	return Bin(And, Cvt(I32, h), c32(0xffff))
}

// BF16ToF32 widens bf16 bits (i16) to f32: the bits move to the top half.
func BF16ToF32(h Expr) Expr {
	return &Bitcast{To: F32, X: Bin(Shl, bitsI32(h), c32(16))}
}

// F32ToBF16 narrows f32 to bf16 bits with round-to-nearest-even; NaN stays
// a (quiet) NaN.
func F32ToBF16(x Expr) Expr {
	u := &Bitcast{To: I32, X: x}
	isNaN := Bin(Gt, Bin(And, u, c32(0x7fffffff)), c32(0x7f800000))
	lsb := Bin(And, Bin(Shr, u, c32(16)), c32(1))
	rounded := Bin(Shr, Bin(Add, Bin(Add, u, c32(0x7fff)), lsb), c32(16))
	quiet := Bin(Or, Bin(Shr, u, c32(16)), c32(0x40))
	return Cvt(I16, Sel(isNaN, quiet, rounded))
}

// halfBitsToF32 widens IEEE half bits (i16) to f32 with the hardware's
// conversion: codegen prints it as fpext half to float.
func halfBitsToF32(h Expr) Expr {
	n := h.Type().Lanes()
	return &Convert{To: Vec(F32, n), X: &Bitcast{To: Vec(F16, n), X: h}}
}

// F16ToF32 widens IEEE half bits (i16) to f32, denormals, inf and NaN
// included, with no f32 subnormal on the way, so that a thread whose
// MXCSR reads denormals as zero (DAZ) or flushes results to zero (FTZ)
// gets the same bits: the exponent is rebiased by an integer add (15 to
// 127), less 0 for a normal half; a subnormal's mantissa m (and zero) is
// rebiased one step further, to 2^-14 · (1 + m/2^10), less 2^-14: m ·
// 2^-24, an f32 subtraction of normal values that is exact (Sterbenz)
// with a normal result (or +0); inf and NaN get the all-ones exponent,
// the mantissa kept.
func F16ToF32(h Expr) Expr {
	hb := bitsI32(h)
	sign := Bin(Shl, Bin(And, hb, c32(0x8000)), c32(16))
	em := Bin(And, hb, c32(0x7fff))
	shifted := Bin(Shl, em, c32(13))
	small := Bin(Lt, em, c32(0x400))
	rebiased := bitsF32(Bin(Add, shifted, Sel(small, c32(113<<23), c32(112<<23))))
	finite := f32Bits(Bin(Sub, rebiased, Sel(small, Float(0x1p-14), Float(0))))
	special := Bin(Or, shifted, c32(0x7f800000))
	mag := Sel(Bin(Ge, em, c32(0x7c00)), special, finite)
	return bitsF32(Bin(Or, mag, sign))
}

// F32ToF16 narrows f32 to IEEE half bits with round-to-nearest-even,
// overflow to inf, denormals and NaN (F. Giesen's float_to_half_fast3_rtne).
func F32ToF16(x Expr) Expr {
	u := &Bitcast{To: I32, X: x}
	sign := Bin(And, u, c32(-0x80000000))
	f := Bin(Xor, u, sign)
	big := Sel(Bin(Gt, f, c32(0x7f800000)), c32(0x7e00), c32(0x7c00))
	denorm := Bin(Sub, &Bitcast{To: I32, X: Bin(Add, &Bitcast{To: F32, X: f}, Float(0.5))}, c32(0x3f000000))
	odd := Bin(And, Bin(Shr, f, c32(13)), c32(1))
	normal := Bin(Shr, Bin(Add, Bin(Add, f, c32(-0x38000000+0xfff)), odd), c32(13))
	mag := Sel(Bin(Ge, f, c32(0x47800000)), big, Sel(Bin(Lt, f, c32(0x38800000)), denorm, normal))
	return Cvt(I16, Bin(Or, mag, Bin(Shr, sign, c32(16))))
}
