package ir

// DType is a storage element type of the KV cache, queries and outputs: a
// row of the dtype table (DTypes), which says everything the compiler needs
// to know about it. A new storage type is a new row (and its IR Type).
type DType int

const (
	DTF32 DType = iota
	DTF16
	DTBF16
	DTE4M3
	DTE5M2
	DTI8
)

// DTypeInfo is one row of the dtype table.
type DTypeInfo struct {
	DType DType
	Name  string // in specs, the manifest and the IR text (f32, f16, bf16)
	Type  Type   // kernel-IR type of a stored element
	Bits  int    // storage width
	// Carrier is the IR type that holds a stored element's bits once
	// legalize-dtype ran: Type itself for f32, which kernels compute on,
	// else an integer of the same width (f16 and bf16 travel as i16).
	Carrier Type
	CType   string // C type of an element in headers and launchers
	// ExpBits and MantBits give the layout (sign, exponent, mantissa; an
	// integer code has no exponent and MantBits magnitude bits).
	ExpBits, MantBits int
	// Widen converts a Carrier value to f32 exactly; Narrow converts f32 to
	// Carrier bits with round-to-nearest-even (NaN stays NaN; 8-bit codes
	// saturate to their finite range, and int8 turns NaN into 0). Both are
	// nil for f32. A Convert to or from a storage-only type means them, in
	// the interpreter and after legalize-dtype alike.
	Widen, Narrow func(Expr) Expr
	// HalfWiden is Widen through one hardware conversion of IEEE half bits
	// (F16C's vcvtph2ps, NEON's fcvtl): f32(bitcast.f16(bits)) for f16;
	// the fp8 codes rearranged into half bits first (and e4m3 times an
	// exact 2^8). A CPU level with native half conversions uses it; nil for
	// the other rows (i8's Widen is already one sitofp).
	HalfWiden func(Expr) Expr
	// FiniteHalfWiden is HalfWiden for codes known not to be NaN, cheaper
	// where HalfWiden spends operations on the NaN codes (e4m3: code &
	// NaNMask == NaNMask); nil where HalfWiden has no NaN path to drop.
	FiniteHalfWiden func(Expr) Expr
	// FiniteBitsWiden is Widen for codes known not to be NaN in integer
	// operations and one f32 multiply by a power of two, no conversion
	// (e4m3: the f32 bits of value / 2^120, times 2^120); a CPU level
	// whose half conversion costs more than its shifts (bitsWiden) uses
	// it where FiniteHalfWiden would go, on a thread that does not read
	// f32 subnormals as zero (rt.fp_daz). nil for the other rows.
	FiniteBitsWiden func(Expr) Expr
	// NaNMask says which codes are NaN for FiniteHalfWiden: those with
	// every bit of the mask set.
	NaNMask int64
	// TensorCore says GPU tensor cores take it as an mma input.
	TensorCore bool
	// KVOnly marks the 8-bit codes of a quantized KV cache: only a
	// variant's kv_dtype may be one (a real value is code * scale); q, o
	// and append inputs keep the variant's dtype.
	KVOnly bool
	// HalfExact says every value converts exactly to f16 and to bf16, so
	// tensor cores take it after a conversion in registers.
	HalfExact bool
}

// DTypes is the dtype table, indexed by DType.
var DTypes = []DTypeInfo{
	{DType: DTF32, Name: "f32", Type: F32, Bits: 32, Carrier: F32, CType: "float", ExpBits: 8, MantBits: 23},
	{DType: DTF16, Name: "f16", Type: F16, Bits: 16, Carrier: I16, CType: "uint16_t", ExpBits: 5, MantBits: 10,
		Widen: F16ToF32, Narrow: F32ToF16, HalfWiden: halfBitsToF32, TensorCore: true},
	{DType: DTBF16, Name: "bf16", Type: BF16, Bits: 16, Carrier: I16, CType: "uint16_t", ExpBits: 8, MantBits: 7,
		Widen: BF16ToF32, Narrow: F32ToBF16, TensorCore: true},
	{DType: DTE4M3, Name: "e4m3", Type: E4M3, Bits: 8, Carrier: U8, CType: "uint8_t", ExpBits: 4, MantBits: 3,
		Widen: E4M3ToF32, Narrow: F32ToE4M3, HalfWiden: E4M3HalfWiden,
		FiniteHalfWiden: E4M3FiniteHalfWiden, FiniteBitsWiden: E4M3FiniteBitsWiden, NaNMask: 0x7f, KVOnly: true, HalfExact: true},
	{DType: DTE5M2, Name: "e5m2", Type: E5M2, Bits: 8, Carrier: U8, CType: "uint8_t", ExpBits: 5, MantBits: 2,
		Widen: E5M2ToF32, Narrow: F32ToE5M2, HalfWiden: E5M2HalfWiden, KVOnly: true, HalfExact: true},
	{DType: DTI8, Name: "i8", Type: I8, Bits: 8, Carrier: U8, CType: "int8_t", MantBits: 7,
		Widen: I8ToF32, Narrow: F32ToI8, KVOnly: true, HalfExact: true},
}

// Info is d's row of the dtype table.
func (d DType) Info() *DTypeInfo { return &DTypes[d] }

// Type is the kernel-IR type that stores values of d.
func (d DType) Type() Type { return DTypes[d].Type }

func (d DType) String() string { return DTypes[d].Name }

// DTypeByName finds a dtype by its spec name.
func DTypeByName(name string) (DType, bool) {
	for _, r := range DTypes {
		if r.Name == name {
			return r.DType, true
		}
	}
	return 0, false
}

// DTypeNames lists the spec names of the dtypes whose KVOnly is kvOnly, in
// table order: a variant's dtype (false) or the 8-bit kv_dtype codes (true).
func DTypeNames(kvOnly bool) []string {
	var out []string
	for _, r := range DTypes {
		if r.KVOnly == kvOnly {
			out = append(out, r.Name)
		}
	}
	return out
}

// StorageOf is the dtype row whose stored elements have IR type t, or nil.
func StorageOf(t Type) *DTypeInfo {
	for i := range DTypes {
		if DTypes[i].Type == t {
			return &DTypes[i]
		}
	}
	return nil
}

// IsStorageOnly reports whether t is a storage type that expressions do
// not compute on (f16, bf16): values are widened to f32 when loaded and
// narrowed when stored, and legalize-dtype carries them as Carrier bits.
func (t Type) IsStorageOnly() bool {
	r := StorageOf(t)
	return r != nil && r.Carrier != t
}
