package ir

import "strconv"

// Type is a scalar type of the kernel IR.
type Type uint8

const (
	Void Type = iota
	Bool
	I16
	I32
	I64
	U8
	F16
	BF16
	F32
	F64
	// I8, E4M3 and E5M2 are the 8-bit codes of a quantized KV cache (int8
	// two's complement, OCP FP8 E4M3 and E5M2): storage only, like f16.
	// Kernels convert them to f32 when loaded and from f32 when stored,
	// both through the dtype table (Widen exact; Narrow rounds to nearest
	// even and saturates), and legalize-dtype carries them as u8 bits.
	I8
	E4M3
	E5M2
)

var typeNames = [...]string{"void", "bool", "i16", "i32", "i64", "u8", "f16", "bf16", "f32", "f64", "i8", "e4m3", "e5m2"}

func (t Type) String() string {
	if t.IsVector() {
		return typeNames[t.Elem()] + "x" + strconv.Itoa(t.Lanes())
	}
	if int(t) >= len(typeNames) {
		return "type(" + strconv.Itoa(int(t)) + ")"
	}
	return typeNames[t]
}

// IsFloat reports whether t is a floating-point type (f16, bf16 and the
// fp8 codes included), or a vector of one.
func (t Type) IsFloat() bool {
	e := t.Elem()
	return e == F16 || e == BF16 || e == F32 || e == F64 || e == E4M3 || e == E5M2
}

// IsInt reports whether t is an integer type (bool excluded; i8 codes
// included), or a vector of one.
func (t Type) IsInt() bool {
	e := t.Elem()
	return e == I16 || e == I32 || e == I64 || e == U8 || e == I8
}

// Bits is the storage width of t (of all its lanes for a vector).
func (t Type) Bits() int {
	if t.IsVector() {
		return t.Elem().Bits() * t.Lanes()
	}
	switch t {
	case Bool:
		return 1
	case U8, I8, E4M3, E5M2:
		return 8
	case I16, F16, BF16:
		return 16
	case I32, F32:
		return 32
	case I64, F64:
		return 64
	}
	return 0
}

// TypeByName maps a type's text form back to the type (vector types
// included: f32x16).
func TypeByName(s string) (Type, bool) {
	for i, n := range typeNames {
		if n == s {
			return Type(i), true
		}
	}
	return vectorTypeByName(s)
}
