package ir

import "math"

// Stmt is a kernel-IR statement.
type Stmt interface{ isStmt() }

// Block is a sequence of statements with its own scope.
type Block struct {
	Stmts []Stmt
}

// Let binds an immutable value.
type Let struct {
	Name  string
	Value Expr
}

// Var declares a mutable scalar initialised to Init.
type Var struct {
	Name string
	Init Expr
}

// Assign sets a Var.
type Assign struct {
	Name  string
	Value Expr
}

// Alloc declares a local array of Size elements of type T. Its contents are
// undefined until stored. Each iteration of an enclosing parallel loop owns
// its own copy. A Shared array (GPU) is one copy per block, visible to every
// thread of the block's Threads loop; it is declared outside that loop. A
// Heap array (CPU, inside a parallel loop) lives in heap scratch that the
// runtime allocates once per worker thread and call instead of on the
// stack; the heap-scratch pass chooses which arrays go there. A Private
// array (GPU, declared among a work item's own statements) is one the
// item's threads keep in registers: element slot*(Size/block) + i is
// touched only by thread slot (warp*32 + lane), so map-threads gives each
// thread its own Size/block elements instead of sharing the array.
type Alloc struct {
	Name    string
	T       Type
	Size    int
	Shared  bool
	Heap    bool
	Private bool
}

// Barrier waits until every thread of the block reached it and makes their
// shared-memory writes visible (GPU __syncthreads).
type Barrier struct{}

// MMA is one warp-wide tensor-core multiply-accumulate m16n8k16 (PTX
// mma.sync ... .row.col.f32.<In>.<In>.f32): D (f32[4] per lane) += A (16x16,
// i32[4] per lane, two In values each) x B (16x8, i32[2] per lane), with
// PTX's fragment layout. In is F16 or BF16. All 32 lanes must execute it.
type MMA struct {
	D, A, B string
	In      Type
}

// MFMA is one wavefront-wide matrix multiply-accumulate 16x16x16 of AMD
// CDNA (v_mfma_f32_16x16x16_f16, v_mfma_f32_16x16x16_bf16): D (f32[4] per
// lane) += A (16x16, i32[2] per lane, two In values each) x B (16x16, i32[2]
// per lane). With j = lane % 16 and g = lane / 16, a lane holds A[j][4g+r]
// and B[4g+r][j] as element r (register r/2, the low half for even r) and
// D[4g+r][j] in d[r]. In is F16 or BF16. All 64 lanes of a warp of a
// 64-lane module must execute it.
type MFMA struct {
	D, A, B string
	In      Type
}

// MFMALanes is the lane width MFMA's fragment layout spans.
const MFMALanes = 64

// Copy copies N consecutive elements Src[SrcIndex ...] to Dst[DstIndex ...]
// (element types of equal width; the bits move unchanged). GPU printers use
// 128-bit accesses when N elements make 16 aligned bytes. An Async copy
// (GPU: cp.async, 16 bytes from a buffer into a shared array) is only
// issued: Dst holds the bits once an AsyncWait of the same thread covers
// the group an AsyncCommit closed after it (and, for other threads, a
// Barrier after that wait).
type Copy struct {
	Dst      string
	DstIndex Expr
	Src      string
	SrcIndex Expr
	N        int
	Async    bool
}

// AsyncCommit closes the group of the thread's async copies issued since
// its last commit (PTX cp.async.commit_group; an empty group is allowed).
type AsyncCommit struct{}

// AsyncWait waits until at most Pending of the thread's committed groups
// are still in flight (PTX cp.async.wait_group Pending).
type AsyncWait struct {
	Pending int
}

// LdMatrix is one warp-wide ldmatrix.sync.aligned.m8n8.xN[.trans].b16 (N
// is 1, 2 or 4): each lane names one 16-byte row of 8 16-bit elements,
// Src[Index ...] in a shared array (lanes 8i .. 8i+7 the rows 0..7 of
// matrix i), and receives in Dst[0 .. N) (i32) its fragment of each
// matrix: elements (lane/4, 2*(lane%4)) and (lane/4, 2*(lane%4)+1), the
// first in the low half; Trans hands out the transposed matrix
// ((2*(lane%4), lane/4) and (2*(lane%4)+1, lane/4)). All 32 lanes must
// execute it.
type LdMatrix struct {
	Dst   string
	Src   string
	Index Expr
	N     int
	Trans bool
}

// ReduceOp is the combining operator of a Reduce.
type ReduceOp uint8

const (
	// ReduceAdd sums (identity 0).
	ReduceAdd ReduceOp = iota
	// ReduceMax takes the maximum as Max does (a NaN element makes a float
	// result NaN; identity -inf for floats, the smallest value for integers).
	ReduceMax
	// ReduceMaxNum is ReduceMax where a NaN element may be dropped: the
	// result is the maximum of the elements that are not NaN (-inf when
	// there are none), or NaN when one is — the target's choice (the
	// interpreter and the GPU targets propagate it, as ReduceMax; the CPU
	// target compares and selects, one instruction where Max takes four).
	// For a max whose NaN elements reach the result another way: the
	// softmax's tile max, where a NaN score s makes exp(s - max) NaN
	// whatever the max is.
	ReduceMaxNum
)

var reduceOpNames = [...]string{"add", "max", "maxnum"}

func (o ReduceOp) String() string { return reduceOpNames[o] }

// BinOp is the binary operator that folds one more value into a Reduce
// (Max for ReduceMaxNum: propagating a NaN is one of its choices).
func (o ReduceOp) BinOp() BinOp {
	if o == ReduceMax || o == ReduceMaxNum {
		return Max
	}
	return Add
}

// IsMax reports whether o is ReduceMax or ReduceMaxNum.
func (o ReduceOp) IsMax() bool { return o == ReduceMax || o == ReduceMaxNum }

// Identity is the value a Reduce over no iterations yields, of type t.
func (o ReduceOp) Identity(t Type) *Const {
	if o == ReduceAdd {
		if t.IsFloat() {
			return &Const{T: t}
		}
		return IntT(t, 0)
	}
	if t.IsFloat() {
		return &Const{T: t, Float: math.Inf(-1)}
	}
	lo, _ := intRange(t)
	return IntT(t, lo)
}

// Reduce binds Name (like a Let) to Op folded over Value for Var in
// [Lo, Hi): `reduce NAME = max over VAR in LO .. HI of EXPR`. Value may use
// Var and every name in scope; it is pure. The folding order is the
// target's (CPU: a vectorized running value; GPU: lane-strided partials and
// butterfly shuffles), so a float sum may round differently per target.
type Reduce struct {
	Name   string
	Op     ReduceOp
	Var    string
	Lo, Hi Expr
	Value  Expr
}

// MatMul is a tile matrix product on local arrays of f32 values (A and B
// may hold a storage type, f16 to 8-bit codes, each element widened to f32
// as the product reads it: a GPU schedule narrows the operands tensor
// cores take before it rewrites the product):
//
//	C[m, n] (+)= sum over k < KExt of A[m, k] * B[k, n]   for m < MExt, n < NExt
//
// with C laid out [M, N], A [M, K] and B [K, N] row-major, or B stored
// transposed as [N, K] (TransB: row n of the array holds column n of B).
// M, N and K are static; MExt, NExt and KExt (i32 expressions, at most the
// static sizes) are the extents that matter. Elements of C outside them are
// unspecified afterwards, so a target may compute the static shape. A target
// may also run the sum over all K: A must be +0 or -0 at k >= KExt (for
// m < MExt). With ZeroSkip an A element of -0 (the weight of a hidden
// position: the attention lowering writes exp(-inf - max) as -0, while exp
// gives +0 when it underflows) contributes exactly nothing, even against a
// NaN or infinite B element (select, don't multiply), so hidden positions
// whose values may hold any bits cannot reach C; a +0 element multiplies
// as IEEE arithmetic does (0·NaN is NaN). The summation order is the
// target's, but an accumulating matmul adds C once, to the product summed
// from zero (the interpreter, lower-tiles, the CPU's micro-kernels and AMX
// tiles, the GPU targets' SIMT loops and matrix fragments):
// over a KV sequence C's f32 error then grows with
// its tiles, not its positions, which matters when a sequence repeats the
// same terms (one page named many times), whose roundings do not cancel.
//
// With BRows, B is read through row offsets instead of as a dense array:
// BRows names a local array of i64 element offsets into B (a buffer, the
// cache pool), one for each row of B as stored (N rows when TransB, else
// K), and B's stored row r is B[BRows[r] ..]. Only the rows below the
// extent that indexes them (NExt when TransB, else KExt) are read, so the
// offsets of the rows past it need not be set: a decode tile reads its K
// and V rows straight from the pages.
//
// With RotB (TransB only), each row of B is rotated as it is read: the
// product reads RotB.Rotated(row n, k) in place of B[n, k] — a decode
// tile's K rows, turned by inline RoPE in registers instead of in a copy.
type MatMul struct {
	C, A, B          string
	M, N, K          int
	TransB           bool
	Accumulate       bool
	ZeroSkip         bool
	MExt, NExt, KExt Expr
	Tag              Tag
	BRows            string
	RotB             *RotB
}

// RotB turns each row n of a transposed B by RoPE's pairs: for i < Half,
// with c = Cos[n·Half + i] and s = Sin[n·Half + i] (f32 local arrays of at
// least N·Half elements) and the pair (a, b) = (i, i + Half) (Pairs
// RopeHalf, rotate-half: the default) or (2i, 2i + 1) (RopeInterleaved,
// GPT-J's),
//
//	B'[n, a] = B[n, a]·c - B[n, b]·s
//	B'[n, b] = B[n, b]·c + B[n, a]·s
//
// each product and sum rounded to f32; elements from 2·Half on are B's.
type RotB struct {
	Cos, Sin string
	Half     int
	Pairs    RopePairs
}

// Rotated is B'[n, k] from B's element x at k, y at its partner (Pair)
// and the pair's cosine and sine, as RotB defines it.
func (r *RotB) Rotated(k int, x, y, c, s float32) float32 {
	switch {
	case k >= 2*r.Half:
		return x
	case r.first(k):
		return float32(x*c) - float32(y*s)
	}
	return float32(x*c) + float32(y*s)
}

// first reports whether the rotated column k is its pair's first element
// (a in RotB's formula).
func (r *RotB) first(k int) bool {
	if r.Pairs == RopeInterleaved {
		return k%2 == 0
	}
	return k < r.Half
}

// Pair is the column k's rotation partner (its pair's other element, or
// k itself past the rotated dims) and the index of its angle in a row of
// the tables (the pair's i; 0 past the rotated dims).
func (r *RotB) Pair(k int) (partner, i int) {
	switch {
	case k >= 2*r.Half:
		return k, 0
	case r.Pairs == RopeInterleaved:
		return k ^ 1, k / 2
	case k < r.Half:
		return k + r.Half, k
	}
	return k - r.Half, k - r.Half
}

// BAt is the index of element (row r, column c) of B as stored (r < N
// and c < K when TransB, else r < K and c < N): r·width + c, or, with
// BRows, BRows[r] + c in i64. r and c are i32.
func (s *MatMul) BAt(r, c Expr) Expr {
	if s.BRows != "" {
		return Bin(Add, Ld(s.BRows, I64, r), Cvt(I64, c))
	}
	w := s.N
	if s.TransB {
		w = s.K
	}
	return Bin(Add, Bin(Mul, r, Int(int64(w))), c)
}

func (*Reduce) isStmt() {}
func (*MatMul) isStmt() {}

func (*Copy) isStmt()        {}
func (*AsyncCommit) isStmt() {}
func (*AsyncWait) isStmt()   {}
func (*LdMatrix) isStmt()    {}
func (*Barrier) isStmt()     {}
func (*MMA) isStmt()         {}
func (*MFMA) isStmt()        {}

// Store writes Value to element Index of buffer or local array Buf.
type Store struct {
	Buf   string
	Index Expr
	Value Expr
}

// LoopKind says how a For's iterations may execute.
type LoopKind uint8

const (
	// Serial loops run in order.
	Serial LoopKind = iota
	// Parallel loops' iterations are independent work items (thread pool on
	// CPU, grid on GPU). Their bodies may not assign outer vars or return.
	Parallel
	// Vector loops are innermost loops that the backend should vectorize.
	Vector
	// Threads loops are GPU SPMD regions: the body runs once per thread of
	// the block with the loop variable bound to the thread index. Lo is 0,
	// Hi the constant block size; they sit directly inside a Parallel loop
	// (one block per iteration) and may hold Barriers and Shuffles, which
	// every thread must reach uniformly. Only GPU backends accept them.
	Threads
	// Spread loops are the target-neutral form of independent iterations
	// inside a work item: no iteration reads what another writes, the body
	// assigns no var declared outside it, and it holds no return, barrier,
	// parallel loop, or continue aimed at the spread itself. The target
	// decides the mapping (CPU: vector or serial loops; GPU: the block's
	// threads, or one iteration per warp when the body reduces).
	Spread
	// Lanes loops are GPU warp-level SPMD regions: `for lane in 0 .. 32
	// lanes` (the module's LaneWidth: 64 on AMD's wavefronts) runs the
	// body once per lane of one warp, together, with the
	// loop variable bound to the lane index. They sit directly in the body
	// of a Spread loop (one iteration per warp) and may hold Shuffles and
	// MMAs, which every lane must reach uniformly.
	Lanes
)

var loopKindNames = [...]string{"serial", "parallel", "vector", "threads", "spread", "lanes"}

func (k LoopKind) String() string {
	if int(k) < len(loopKindNames) {
		return loopKindNames[k]
	}
	return "kind?"
}

// LoopKindByName maps a loop kind's text form back to the kind.
func LoopKindByName(s string) (LoopKind, bool) {
	for i, n := range loopKindNames {
		if n == s {
			return LoopKind(i), true
		}
	}
	return Serial, false
}

// DefaultLanes is the lane count of a warp (the GPU's SIMD group: NVIDIA's
// warp, AMD's wavefront) in a module that sets no other: NVIDIA's 32.
const DefaultLanes = 32

// MaxWarpLanes is the widest warp a module may set (AMD's wavefront of 64).
const MaxWarpLanes = 64

// Range names the bounds [Lo, Hi] (inclusive) that a position variable
// takes inside a tile loop. Passes such as classify-tiles read them.
type Range struct {
	Var    string
	Lo, Hi Expr
}

// Next names, for a staging loop (TagStage), the same loop in the work
// item its thread runs next, where the lowering knows that item: this
// item's loop with each of Subst's names standing for its value, when
// When holds. It is a hint for passes that look ahead past an item's last
// tile (prefetch-kv), which may read through it what the loop itself
// reads (page tables, pool rows), guarded as the loop guards them: the
// lowering names only a next item of the same sequence.
type Next struct {
	When  Expr
	Subst []Rebind
}

// Rebind binds Name, a scalar in scope (a let, var, scalar parameter or
// outer loop variable; not the loop's own), to Value.
type Rebind struct {
	Name  string
	Value Expr
}

// For runs Body for Var in [Lo, Hi) (i32). Tag names the loop's role for
// passes (TagKVTile, ...); Ranges describe position variables that the
// body derives from the loop. Run, for a Parallel loop, is how many
// consecutive items belong together — a decode's kv heads of one sequence,
// which read the same pages —, so the CPU runtime hands a thread whole runs
// where every thread can have one; 0 or 1 says nothing. Next, where not
// nil, is the loop of the thread's next work item.
type For struct {
	Var    string
	Lo, Hi Expr
	Kind   LoopKind
	Tag    Tag
	Run    int
	Ranges []Range
	Next   *Next
	Body   *Block
}

// If runs Then when Cond holds, else Else (which may be nil). Tag marks
// statements that passes look for (TagMask).
type If struct {
	Cond Expr
	Then *Block
	Else *Block
	Tag  Tag
}

// Return leaves the kernel with an i32 status.
type Return struct {
	Value Expr
}

// Continue skips to the next iteration of the innermost For; in a parallel
// loop's own body it ends the work item.
type Continue struct{}

// RuntimeRoutines are the routines a CallStmt may name besides the module's
// kernels, with their argument counts; each returns an i32.
//
//	rt.num_threads()  the worker threads the next parallel loop may use
//	rt.cpu_level()    the CPU level the work kernels run at: an index into
//	                  the target's levels (CPU), -1 when ATTNC_CPU_LEVEL
//	                  names one the CPU lacks or none
//	rt.amx_mm32(a, aoff, lda, b, boff, ldb, c, coff, ldc, steps, mblocks, nblocks, acc)
//	                  (CPU, x86-64-amx) an mblocks × nblocks grid of 32×32
//	                  blocks of C = A·Bᵀ (acc 0) or C += A·Bᵀ (acc 1:
//	                  each block's product, summed from zero on the
//	                  tiles, added to C's once) on AMX tiles, under one tile
//	                  configuration: a and b are i32 buffers of bf16 pairs
//	                  (low half the even element), A's row m's pair k at
//	                  a[aoff + m·lda + k], B's pair row k's column n at
//	                  b[boff + k·ldb + n]; c an f32 buffer written at
//	                  c[coff + m·ldc + n] for m < 32·mblocks,
//	                  n < 32·nblocks; steps blocks of 16 pairs along K. Each
//	                  step of a block is TDPBF16PS's operation
//	                  (AMXBlockStep); no block when a count is below 1;
//	                  returns 0
//	rt.fp_daz()       (CPU, x86-64) 1 when the calling thread reads
//	                  denormal f32 operands as zero (MXCSR's DAZ, which a
//	                  caller may set: PyTorch's set_flush_denormal, a
//	                  library built with -ffast-math), else 0; read anew
//	                  at each call (workers inherit the environment of the
//	                  thread that started them)
var RuntimeRoutines = map[string]int{"rt.num_threads": 0, "rt.cpu_level": 0, "rt.amx_mm32": 13, "rt.fp_daz": 0}

// RuntimeBuffers are the arguments of a runtime routine that name buffers
// (Refs), by index; its other arguments are i32 values.
var RuntimeBuffers = map[string][]int{"rt.amx_mm32": {0, 3, 6}}

// CallStmt calls another kernel of the same module with Args matching its
// params (buffers by name as Refs, or NULL — the constant 0, IsNullArg —
// for a param declared null; scalars as i32 expressions). When Result is
// not empty the returned i32 status is bound to it like a Let.
type CallStmt struct {
	Result string
	Fn     string
	Args   []Expr
}

// NullArg is the argument a CallStmt passes for a NULL buffer.
func NullArg() Expr { return Int(0) }

// IsNullArg says whether a, a CallStmt's argument for a buffer param, is
// NULL (NullArg).
func IsNullArg(a Expr) bool {
	c, ok := a.(*Const)
	return ok && c.T == I32 && c.Int == 0
}

// Malloc allocates Size elements of T on the heap (CPU) into buffer Name;
// the kernel returns ErrNoMemory when that fails. Free releases it.
type Malloc struct {
	Name string
	T    Type
	Size Expr
}

// Free releases a Malloc'd buffer.
type Free struct {
	Name string
}

func (*Malloc) isStmt()   {}
func (*Free) isStmt()     {}
func (*Block) isStmt()    {}
func (*Let) isStmt()      {}
func (*Var) isStmt()      {}
func (*Assign) isStmt()   {}
func (*Alloc) isStmt()    {}
func (*Store) isStmt()    {}
func (*For) isStmt()      {}
func (*If) isStmt()       {}
func (*Return) isStmt()   {}
func (*Continue) isStmt() {}
func (*CallStmt) isStmt() {}

// Param is a kernel argument: a buffer (pointer to elements of Elem, shape
// symbolic, for the manifest) or a scalar of type Elem.
type Param struct {
	Name   string
	Buffer bool
	Elem   Type
	Shape  []string // symbolic dims, e.g. {"total_q", "32", "128"}
	Output bool     // the kernel writes this buffer
	Null   bool     // the caller may pass NULL (e.g. lse)
}

// Kernel is one function of a module. Every kernel returns an i32 status.
type Kernel struct {
	Name   string
	Role   Role
	Entry  bool // the public dispatch entry for its role
	Params []*Param
	Body   *Block

	// Level names the CPU level (vector ISA: a name of the CPU target's
	// level table, such as x86-64-v4) that this clone of a work kernel is
	// scheduled for; empty for kernels every CPU runs.
	Level string
}

// Module is the unit a backend prints: the kernels of one variant plus the
// error table used by <Prefix>_strerror and the named expression functions
// (Defs) that calls such as @mask.bool(...) refer to until inline-defs
// expands them.
type Module struct {
	Name    string
	Prefix  string
	Defs    []*Def
	Kernels []*Kernel
	Errors  []ErrorCode
	Plans   []*Plan // how each role's entry runs its kernels

	// Lanes is the lane count of a warp — the extent of every Lanes
	// loop, the lanes a shuffle exchanges among and the threads a warp
	// operation waits for — when it is not DefaultLanes (0). A GPU target's
	// schedule sets it (SetLaneWidth); the verifier and the interpreter
	// honour it.
	Lanes int
}

// LaneWidth is the lane count of m's warps (DefaultLanes for a nil module
// or one that sets none).
func (m *Module) LaneWidth() int {
	if m == nil || m.Lanes == 0 {
		return DefaultLanes
	}
	return m.Lanes
}

// SetLaneWidth sets the lane count of m's warps (stored as 0 when it is
// DefaultLanes, so that a module of 32-lane warps prints without it).
func (m *Module) SetLaneWidth(n int) {
	if n == DefaultLanes {
		n = 0
	}
	m.Lanes = n
}

// Def is a named pure expression function: `def NAME(a: i32, ...): T = body`.
// Lowering states a variant's mask, score transform and dispatch rules as
// Defs; the registry evaluates the same Defs in Go.
type Def struct {
	Name   string
	Params []*Param // scalars only
	// Uses are kernel arguments the body reads by name (param tensors and
	// their dims): every kernel that calls the Def declares them.
	Uses []*Param
	Body Expr
}

// Def finds a def by name.
func (m *Module) Def(name string) *Def {
	for _, d := range m.Defs {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// ErrorCode is a status a kernel may return.
type ErrorCode struct {
	Code int
	Name string
	Msg  string
}

// Kernel finds a kernel by name.
func (m *Module) Kernel(name string) *Kernel {
	for _, k := range m.Kernels {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// Param finds a parameter by name.
func (k *Kernel) Param(name string) *Param {
	for _, p := range k.Params {
		if p.Name == name {
			return p
		}
	}
	return nil
}
