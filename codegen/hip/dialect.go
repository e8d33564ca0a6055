package hip

import (
	"fmt"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/ir"
)

// Dialect is HIP C++ as the C-style core prints it: the names of the
// Prelude (which maps them to the HIP headers, to clang's AMDGPU builtins or
// to the emulator with 64-lane warps) and the HIP runtime API through the
// prelude's host names. It differs from CUDA's where CDNA3 differs: the
// matrix instruction is MFMA 16x16x16 (attnc_mfma_*), there is no ldmatrix,
// the "async" copies are plain copies, and __launch_bounds__'s second
// argument counts waves per SIMD.
var Dialect = &cstyle.Dialect{
	Name:    "HIP",
	Ext:     ".hip",
	About:   "// Compiles with hipcc (HIP headers), with clang++ -x hip -nogpulib -nogpuinc (own\n// prelude), and as C++ with -DATTNC_EMULATE for the CPU emulator (64-lane warps).\n",
	Prelude: Prelude,
	Kernel:  "ATTNC_KERNEL",
	LaunchBounds: func(block, minWaves int) string {
		return fmt.Sprintf("__launch_bounds__(%d, %d) ", block, minWaves)
	},
	Restrict:    "__restrict__",
	ThreadIndex: "attnc_tid()",
	BlockIndex:  "attnc_bid()",
	GridBlocks:  "attnc_nblocks()",
	// LLVM's AMDGPU unroller would unroll a thread's share of a staging
	// loop whole, and the scheduler then hoists every iteration's loads:
	// hundreds of VGPRs and spills where the RoPE staging of K is inline.
	PhaseLoop:     "#pragma nounroll",
	Barrier:       "attnc_sync();",
	DynamicShared: "ATTNC_DYN_SMEM(%s);",
	ShuffleXor:    map[ir.Type]string{ir.F32: "attnc_shfl_xor_f32(%s, %d)", ir.I32: "attnc_shfl_xor_i32(%s, %d)"},
	Vec16:         "attnc_v16",
	AsyncCopy16:   "attnc_cp_async16(%s, %s);",
	AsyncCommit:   "attnc_cp_async_commit();",
	AsyncWait:     "attnc_cp_async_wait<%d>();",
	MFMA:          "attnc_mfma_%s(%s, %s, %s);",
	ArgAtUse:      "ATTNC_ARG(%s, %d, %s)",
	LdMatrix: func(n int, trans bool, dst, addr string) string {
		panic(fmt.Sprintf("ldmatrix x%d into %s has no HIP form (CDNA3 has no ldmatrix: the HIP target reads fragments per element)", n, dst))
	},

	HostGuard: "ATTNC_NO_HOST",
	Entry:     `extern "C"`,
	Stream:    "attnc_stream_t",
	Launch: func(kernel, grid string, block, smem int, stream, args string) string {
		return fmt.Sprintf("ATTNC_LAUNCH(%s, %s, %d, %d, %s, %s)", kernel, grid, block, smem, stream, args)
	},
	SetShared: "attnc_set_smem((const void*)%s, %d)",
	Alloc:     "attnc_alloc((void**)&%s, %s, %s)",
	Free:      "attnc_free(%s, %s)",
	LastError: "attnc_last_error()",
}

// Host says how host launchers are written (the target's choices). With
// MinBlocks set, its value is HIP's second __launch_bounds__ argument: the
// minimum waves per SIMD.
type Host = cstyle.Host

// Emit prints the HIP C++ source of a legalized GPU module scheduled for
// 64-lane wavefronts: its kernels and, from its plans, a host launcher per
// public entry.
func Emit(m *ir.Module, h Host) (string, error) { return cstyle.Emit(m, Dialect, h) }
