package cuda

import (
	"fmt"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/ir"
)

// vec16 defines the 16-byte copy type after the prelude: CUDA's uint4
// with the CUDA headers, a vector of four 32-bit words elsewhere.
const vec16 = `
#if defined(__NVCC__)
typedef uint4 attnc_v16; // 128-bit loads and stores
#else
typedef uint32_t attnc_v16 __attribute__((vector_size(16)));
#endif
`

// Dialect is CUDA C++ as the C-style core prints it: the names of the
// Prelude (which maps them to CUDA, to clang's NVPTX builtins or to the
// emulator) and CUDA's runtime API through the prelude's host names.
var Dialect = &cstyle.Dialect{
	Name:    "CUDA",
	Ext:     ".cu",
	About:   "// Compiles with nvcc (CUDA headers), with clang++ -x cuda -nocudainc (own\n// prelude), and as C++ with -DATTNC_EMULATE for the CPU emulator.\n",
	Prelude: Prelude + vec16,
	Kernel:  "ATTNC_KERNEL",
	LaunchBounds: func(block, minBlocks int) string {
		return fmt.Sprintf("__launch_bounds__(%d, %d) ", block, minBlocks)
	},
	Restrict:      "__restrict__",
	ThreadIndex:   "attnc_tid()",
	BlockIndex:    "attnc_bid()",
	GridBlocks:    "attnc_nblocks()",
	Barrier:       "attnc_sync();",
	DynamicShared: "ATTNC_DYN_SMEM(%s);",
	ShuffleXor:    map[ir.Type]string{ir.F32: "attnc_shfl_xor_f32(%s, %d)", ir.I32: "attnc_shfl_xor_i32(%s, %d)"},
	Vec16:         "attnc_v16",
	AsyncCopy16:   "attnc_cp_async16(%s, %s);",
	AsyncCommit:   "attnc_cp_async_commit();",
	AsyncWait:     "attnc_cp_async_wait<%d>();",
	MMA:           "attnc_mma_%s(%s, %s, %s);",
	LdMatrix: func(n int, trans bool, dst, addr string) string {
		tr := ""
		if trans {
			tr = "_trans"
		}
		return fmt.Sprintf("attnc_ldmatrix_x%d%s(%s, %s);", n, tr, dst, addr)
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

// Host says how host launchers are written (the target's choices).
type Host = cstyle.Host

// Emit prints the CUDA C++ source of a legalized GPU module: its kernels
// and, from its plans, a host launcher per public entry.
func Emit(m *ir.Module, h Host) (string, error) { return cstyle.Emit(m, Dialect, h) }
