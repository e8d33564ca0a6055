package ir

import "fmt"

// Pos is a source position in a .attn file.
type Pos struct {
	File string
	Line int
	Col  int
}

// String renders p as file:line:col.
func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// PosError is an error located in a spec: it prints as "file:line:col: msg".
type PosError struct {
	Pos Pos
	Msg string
}

func (e *PosError) Error() string { return e.Pos.String() + ": " + e.Msg }

// Errorf builds a PosError.
func Errorf(p Pos, format string, args ...any) error {
	return &PosError{Pos: p, Msg: fmt.Sprintf(format, args...)}
}

// Layout is the order of a page's axes.
type Layout int

const (
	// HND pages are [kv_heads, page_size, d].
	HND Layout = iota
	// NHD pages are [page_size, kv_heads, d].
	NHD
)

func (l Layout) String() string {
	if l == NHD {
		return "NHD"
	}
	return "HND"
}

// Table is the page-table encoding.
type Table int

const (
	// CSR is FlashInfer's kv_indptr / kv_indices / kv_last_page_len.
	CSR Table = iota
	// BlockTable is vLLM's block_table / max_blocks / kv_lens.
	BlockTable
)

func (t Table) String() string {
	if t == BlockTable {
		return "block_table"
	}
	return "csr"
}

// MaskKind is one clause of a mask line.
type MaskKind int

const (
	MaskCausal MaskKind = iota
	MaskNone
	MaskWindow
	MaskExpr
	MaskTree
	MaskCustom
)

var maskKindNames = [...]string{"causal", "none", "window", "expr", "tree", "custom"}

func (k MaskKind) String() string { return maskKindNames[k] }

// MaskClause is one clause of `mask ...`; a position is visible when every
// clause allows it.
type MaskClause struct {
	Kind MaskKind
	Left int  // window(left = W); window(size = S) is stored as left = S - 1
	Expr Expr // expr(...): Bool over q_pos, kv_pos, head, batch
	Pos  Pos
}

// SinkKind says what `sinks` adds.
type SinkKind int

const (
	SinkTokens SinkKind = iota
	SinkLearned
)

// Sinks is the `sinks` line.
type Sinks struct {
	Kind   SinkKind
	Tokens int
	Pos    Pos
}

// RopeStyle is the source of inline RoPE's angles: a frequency schedule,
// runtime per-pair factors, or runtime cos/sin tables.
type RopeStyle int

const (
	RopeNormal RopeStyle = iota
	RopeLlama3
	RopeYarn
	// RopeFactors is `style = factors`: f_i = θ^(-2i/R) / rope_factors[i],
	// the factors a runtime argument f32[R/2]; Params["attn_factor"]
	// multiplies cos and sin.
	RopeFactors
	// RopeTable is `rope inline(table, ...)`: cos and sin of pair i at
	// position p are the runtime arguments rope_cos[p, i], rope_sin[p, i]
	// (f32[rope_positions, R/2]).
	RopeTable
)

// RopePairs says which elements a RoPE rotation pairs.
type RopePairs int

const (
	// RopeHalf pairs (x[i], x[i + R/2]): HF's rotate_half, GPT-NeoX, Llama.
	RopeHalf RopePairs = iota
	// RopeInterleaved pairs (x[2i], x[2i+1]): GPT-J, llama.cpp NORM, DeepSeek.
	RopeInterleaved
)

func (p RopePairs) String() string {
	if p == RopeInterleaved {
		return "interleaved"
	}
	return "half"
}

// Rope is `rope inline(...)` or `rope at_append(...)`.
type Rope struct {
	Theta  float64
	Style  RopeStyle
	Params map[string]float64 // factor, low_freq, high_freq, original_max, ...
	// Pairs is the pairing of rotated elements (default RopeHalf).
	Pairs RopePairs
	// RotaryDim is how many leading head dims rotate (even, <= HeadDimQK);
	// the rest pass through. 0 means all of HeadDimQK.
	RotaryDim int
	// Untruncated is YaRN's `truncate = false` (gpt-oss): the correction
	// range keeps fractional dims instead of HF's default floor/ceil.
	Untruncated bool
	Pos         Pos
	// AtAppend is `rope at_append(...)`: qkv_append rotates q and k at
	// their positions before it writes them, so the cache holds rotated K
	// and the attention kernels rotate nothing. Otherwise (inline) the
	// attention kernels rotate q and k as they stage them.
	AtAppend bool
}

// Dim is the number of rotated dims for a head_dim qk of dqk.
func (r *Rope) Dim(dqk int) int {
	if r.RotaryDim > 0 {
		return r.RotaryDim
	}
	return dqk
}

// QKNorm is `qk_norm rms(eps = E, offset = O)`: qkv_append applies
// RMSNorm over the head dim to every q and k head, in f32, before any
// rotation: x / sqrt(mean(x^2) + Eps) * (Offset + w).
type QKNorm struct {
	Eps    float64
	Offset float64 // 0 (Qwen3) or 1 (Gemma 3)
	Pos    Pos
}

// MLA is `mla(heads, kv_lora_rank, rope_dim)`.
type MLA struct {
	Heads      int
	KVLoraRank int
	RopeDim    int
	Pos        Pos
}

// LSEBase is the base of every lse a variant's kernels read or write.
type LSEBase int

const (
	// LSEBaseE is the natural log (the default; HF, PyTorch, vLLM).
	LSEBaseE LSEBase = iota
	// LSEBase2 is log base 2 (FlashInfer, TVM).
	LSEBase2
)

func (b LSEBase) String() string {
	if b == LSEBase2 {
		return "2"
	}
	return "e"
}

// KVScale says how the scales of a quantized KV cache are laid out.
type KVScale int

const (
	// KVScaleNone: the cache holds dtype values, no scales.
	KVScaleNone KVScale = iota
	// KVScalePerTensor: k_scale and v_scale are f32[1].
	KVScalePerTensor
	// KVScalePerHead: k_scale and v_scale are f32[kv_heads].
	KVScalePerHead
)

func (k KVScale) String() string {
	return [...]string{"none", "per_tensor", "per_head"}[k]
}

// Role is what a kernel does.
type Role string

const (
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
	RoleMergeState Role = "merge_state"
	RoleAppend     Role = "append"
	RoleCopyPage   Role = "copy_page"
	// RoleCompactCopy copies slots within each sequence, in index order
	// (TVM's compact KV copy after a speculative tree is accepted).
	RoleCompactCopy Role = "compact_copy"
	// RoleReadKV reads slots back out of the cache, dequantized.
	RoleReadKV Role = "read_kv"
	// RoleGatherPages copies whole pages from the pool to a contiguous
	// buffer, RoleScatterPages from a buffer into the pool (KV transfer).
	RoleGatherPages  Role = "gather_pages"
	RoleScatterPages Role = "scatter_pages"
	// RolePrefillRagged is prefill over K/V rows held contiguously (not
	// in pages), ragged by kv_token_indptr.
	RolePrefillRagged Role = "prefill_ragged"
	// RoleQKVAppend splits fused qkv rows into q, k and v heads, applies
	// qk_norm and rope at_append when declared, writes k and v into the
	// cache and q to q_out.
	RoleQKVAppend Role = "qkv_append"
)

// Roles lists every kernel role, in the order the kernels line's messages
// name them.
func Roles() []Role {
	return []Role{RolePrefill, RoleDecode, RoleMergeState, RoleAppend, RoleCopyPage,
		RoleCompactCopy, RoleReadKV, RoleGatherPages, RoleScatterPages, RolePrefillRagged, RoleQKVAppend}
}

// KernelRef is one name on the `kernels` line.
type KernelRef struct {
	Role Role
	Pos  Pos
}

// Variant is a validated attention variant: everything a spec says, with
// defaults filled in.
type Variant struct {
	Name string
	Pos  Pos

	QOHeads, KVHeads    int
	HeadDimQK, HeadDimV int
	DType               DType
	PageSize            int
	Layout              Layout
	Table               Table
	Masks               []MaskClause
	Sinks               *Sinks
	Score               Expr // Float over score, q_pos, kv_pos, head; nil = identity
	ScorePos            Pos
	Scale               float64 // always set: explicit or 1/sqrt(HeadDimQK)
	ScaleExplicit       bool
	Rope                *Rope
	QKNorm              *QKNorm
	MLA                 *MLA
	Kernels             []KernelRef
	CachePos, HeadsPos  Pos
	// LSEBase is the base of the lse arguments (`lse base = e | 2`).
	LSEBase LSEBase
	// KVDType is the type the cache stores K and V as: DType, or an 8-bit
	// code of the dtype table (KVOnly) from `cache paged(kv_dtype = ...)`,
	// whose real value is code * scale.
	KVDType DType
	// KVScale is `kv_scale = per_tensor | per_head` (KVScaleNone unless
	// KVDType is an 8-bit code; per_tensor by default).
	KVScale KVScale
	// Params are the `param` lines, in source order: read-only tensors
	// that mask and score expressions index (ParamRead).
	Params []*ParamDecl
}

// ParamDim is one dimension of a `param` tensor: a literal Size, or a
// Name — qo_heads and kv_heads (the variant's, known when compiling),
// batch (the batch_size argument) or a new name, an i32 scalar argument.
type ParamDim struct {
	Size int
	Name string
}

// ParamDecl is `param NAME DTYPE[DIM, ...]`: a read-only row-major kernel
// argument of type T (F32 or I32).
type ParamDecl struct {
	Name string
	T    Type
	Dims []ParamDim
	Pos  Pos
}

// Runtime reports whether d is an i32 argument of its own (a named dim
// other than qo_heads, kv_heads and batch).
func (d ParamDim) Runtime() bool {
	return d.Name != "" && d.Name != "qo_heads" && d.Name != "kv_heads" && d.Name != "batch"
}

// Param returns the param named name, or nil.
func (v *Variant) Param(name string) *ParamDecl {
	for _, p := range v.Params {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ParamDimNames lists the runtime dims of v's params (i32 arguments), in
// the order their params declare them first.
func (v *Variant) ParamDimNames() []string { return v.ParamDimNamesOf(v.Params) }

// ParamDimNamesOf is ParamDimNames over ps.
func (*Variant) ParamDimNamesOf(ps []*ParamDecl) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range ps {
		for _, d := range p.Dims {
			if d.Runtime() && !seen[d.Name] {
				seen[d.Name] = true
				out = append(out, d.Name)
			}
		}
	}
	return out
}

// ReadsParams reports whether e reads a param tensor.
func ReadsParams(e Expr) bool {
	found := false
	if e != nil {
		VisitExpr(e, func(x Expr) {
			if _, ok := x.(*ParamRead); ok {
				found = true
			}
		})
	}
	return found
}

// Quantized reports whether the cache holds 8-bit codes with scales.
func (v *Variant) Quantized() bool { return v.KVScale != KVScaleNone }

// ScaleLen is the number of elements of k_scale and v_scale: 1 per
// tensor, kv heads per head.
func (v *Variant) ScaleLen() int {
	if v.KVScale == KVScalePerHead {
		return v.KVHeads
	}
	return 1
}

// NonCausal reports whether every mask clause is `none`: the only masks
// under which a sequence may have more query tokens than cached tokens
// (cross / encoder attention).
func (v *Variant) NonCausal() bool {
	for _, m := range v.Masks {
		if m.Kind != MaskNone {
			return false
		}
	}
	return len(v.Masks) > 0
}

// InlineRope is the RoPE the attention kernels apply as they stage q and
// k: the variant's rope unless it is rope at_append (then nil: the cache
// and q_out already hold rotated rows).
func (v *Variant) InlineRope() *Rope {
	if v.Rope == nil || v.Rope.AtAppend {
		return nil
	}
	return v.Rope
}

// GroupSize is qo heads per kv head.
func (v *Variant) GroupSize() int { return v.QOHeads / v.KVHeads }

// HasRole reports whether the variant lists role r.
func (v *Variant) HasRole(r Role) bool {
	for _, k := range v.Kernels {
		if k.Role == r {
			return true
		}
	}
	return false
}

// ValidPageSizes lists every page size a kernel accepts.
var ValidPageSizes = []int{1, 2, 4, 8, 16, 32, 64, 128, 256}

// ValidPageSize reports whether n is a power of two in 1..256.
func ValidPageSize(n int) bool { return n >= 1 && n <= 256 && n&(n-1) == 0 }

// The largest shapes the generated kernels serve; the frontend rejects
// larger ones at their position in the spec. They cover real models:
// DeepSeek MLA's head dims (qk 576 = 512 + 64, v 512), head_dim 256
// (Gemma), 128 query heads (DeepSeek, Llama 3.1 405B) and Falcon-180B's
// 232.
const (
	MaxHeadDimQK = 576
	MaxHeadDimV  = 512
	MaxHeads     = 256
)

// MaxSeqLen is the most query or cached tokens one sequence may have
// (2^30); the kernels reject longer ones, so positions stay below it in
// magnitude.
const MaxSeqLen = 1 << 30

// MaxNameLen is the longest variant name: names prefix every C symbol and
// macro of the generated artifacts.
const MaxNameLen = 64
