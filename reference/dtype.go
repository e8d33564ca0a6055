// Package reference is the obviously-correct oracle: it gathers pages and
// computes softmax(QKᵀ·scale)V in float64, and generates random paged caches
// for tests. It imports ir only (it must not import passes or codegen).
package reference

import (
	"encoding/binary"
	"math"

	"github.com/attnc/attnc/ir"
)

// F16Bits converts x to IEEE binary16 with round-to-nearest-even, producing
// subnormals, ±Inf on overflow and a quiet NaN (payload kept where it fits)
// for NaN.
func F16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 1 { // normal in half (or overflow)
		h := uint32(e)<<10 | mant>>13
		rem := mant & 0x1fff
		if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
			h++ // a carry into the exponent is the right result
		}
		if h >= 0x7c00 {
			return sign | 0x7c00
		}
		return sign | uint16(h)
	}
	// Subnormal in half: units of 2^-24.
	shift := uint(14 - e)
	if exp == 0 || shift > 24 {
		return sign
	}
	m := mant | 0x800000
	h := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && h&1 == 1 {
		h++
	}
	return sign | uint16(h)
}

// F16Float converts IEEE binary16 bits to float32 exactly.
func F16Float(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BF16Bits converts x to bfloat16 with round-to-nearest-even; NaN stays a
// (quiet) NaN with its sign.
func BF16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BF16Float converts bfloat16 bits to float32 exactly.
func BF16Float(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Round is x after a cast to storage type dt and back.
func Round(dt ir.DType, x float32) float32 {
	switch dt {
	case ir.DTF16:
		return F16Float(F16Bits(x))
	case ir.DTBF16:
		return BF16Float(BF16Bits(x))
	}
	if dt.Info().KVOnly {
		return float32(CodeValue(dt, CodeOf(dt, float64(x))))
	}
	return x
}

// Size is the storage width of dt in bytes.
func Size(dt ir.DType) int { return dt.Info().Bits / 8 }

// Encode stores xs as little-endian dt elements (f32 bits, f16/bf16 bits
// rounded to nearest even, or 8-bit codes: CodeOf, no scale), ready to copy
// into a kernel buffer.
func Encode(dt ir.DType, xs []float32) []byte {
	out := make([]byte, Size(dt)*len(xs))
	for i, x := range xs {
		switch dt {
		case ir.DTF16:
			binary.LittleEndian.PutUint16(out[2*i:], F16Bits(x))
		case ir.DTBF16:
			binary.LittleEndian.PutUint16(out[2*i:], BF16Bits(x))
		case ir.DTE4M3, ir.DTE5M2, ir.DTI8:
			out[i] = CodeOf(dt, float64(x))
		default:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		}
	}
	return out
}

// Decode reads little-endian dt elements back into float32.
func Decode(dt ir.DType, b []byte) []float32 {
	n := len(b) / Size(dt)
	out := make([]float32, n)
	for i := range out {
		switch dt {
		case ir.DTF16:
			out[i] = F16Float(binary.LittleEndian.Uint16(b[2*i:]))
		case ir.DTBF16:
			out[i] = BF16Float(binary.LittleEndian.Uint16(b[2*i:]))
		case ir.DTE4M3, ir.DTE5M2, ir.DTI8:
			out[i] = float32(CodeValue(dt, b[i]))
		default:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return out
}
