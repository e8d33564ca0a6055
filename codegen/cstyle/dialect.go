package cstyle

import "github.com/attnc/attnc/ir"

// Dialect is what one GPU C++ language sets where GPU languages differ;
// the core (the op table, statements, loops, launchers) is the same for
// all. A dialect is a package-level value in its codegen package
// (codegen/cuda's Dialect), passed to Emit. Fields holding a format take
// the arguments their comment names, in that order; text a dialect prints
// must be defined by its Prelude (or its language).
type Dialect struct {
	// Name is the language's name in error messages ("no CUDA form");
	// errors from Emit start with it in lower case.
	Name string
	// Ext is the generated file's extension (".cu").
	Ext string
	// About is the comment printed after the file's first line (each line
	// starting with "// " and ending in a newline): how the file compiles.
	About string
	// Prelude is the text after the header comment, before Helpers: the
	// dialect's names (kernel qualifier, thread indices, barrier, shuffles,
	// shared memory, async copies, matrix fragments, the prelude's float
	// functions, the launch and memory API), the fixed-width integer types,
	// __host__ and __device__, and AttncV16.
	Prelude string
	// Types overrides the core's C type of an IR type (the core prints the
	// storage-only types, f16, bf16 and the 8-bit codes, as their carrier's
	// type, the dtype table's; a dialect with native half types may name
	// them here).
	Types map[ir.Type]string

	// Kernel is the qualifier text before "void name(...)" of a kernel
	// (C linkage included: the launchers and the tests find kernels by name).
	Kernel string
	// LaunchBounds prints the attribute between "void " and the kernel's
	// name for a block of block threads and minBlocks blocks per
	// multiprocessor (called only when the target asks for bounds),
	// including its trailing space.
	LaunchBounds func(block, minBlocks int) string
	// Restrict qualifies buffer parameters ("__restrict__").
	Restrict string
	// ThreadIndex, BlockIndex and GridBlocks are int expressions: the
	// thread's index in its block, the block's index in the grid and the
	// number of blocks (x dimension only).
	ThreadIndex, BlockIndex, GridBlocks string
	// PhaseLoop, when not "", is the line printed before each serial loop
	// that strides a spread over a block's threads (tag phase: a thread's
	// share of independent iterations), e.g. a pragma that keeps the
	// compiler from unrolling them.
	PhaseLoop string
	// Barrier is the statement that waits for every thread of the block
	// (and makes their shared-memory writes visible).
	Barrier string
	// DynamicShared declares the byte pointer to the block's dynamic
	// shared memory; its argument is the pointer's name. Shared arrays are
	// carved from it at 16-byte aligned offsets.
	DynamicShared string
	// ShuffleXor maps the shuffled type (f32, i32) to the format of a
	// butterfly shuffle over the whole lane group (arguments: value, lane
	// mask); the lane count and member mask are the prelude's.
	ShuffleXor map[ir.Type]string
	// Vec16 is the type of one 16-byte load or store (a Copy of 16 bytes).
	Vec16 string
	// AsyncCopy16 is the format of a 16-byte global → shared copy that
	// completes at a later AsyncWait (arguments: destination address,
	// source address); AsyncCommit closes the thread's group of copies;
	// AsyncWait's format takes the number of groups that may stay pending.
	AsyncCopy16, AsyncCommit, AsyncWait string
	// MMA is the format of one matrix instruction d += a·b on fragments
	// (arguments: the operand dtype's name, e.g. f16, then d, a, b).
	MMA string
	// MFMA is the format of one wavefront matrix instruction d += a·b on
	// AMD's 16x16x16 fragments (arguments as MMA's); "" when the language
	// has none.
	MFMA string
	// LdMatrix prints a fragment load of n 8×8 matrices (transposed or
	// not) into the register array dst from the shared address addr.
	LdMatrix func(n int, trans bool, dst, addr string) string
	// ArgAtUse, when not "", is the format of a kernel parameter read from
	// the kernel's argument segment where the code uses it (arguments: the
	// parameter's C type without restrict, its byte offset (ArgOffsets), its
	// name), so that the compiler does not hold it in registers from the
	// kernel's start; Host.ArgsAtUse names the parameters printed this way.
	ArgAtUse string

	// Host side: launchers are written against these names.

	// HostGuard is the macro that, when defined, leaves out the host side
	// (device-only compiles): launchers are printed inside #ifndef it.
	HostGuard string
	// Entry is the qualifier text before a launcher's return type (C
	// linkage: the header declares it).
	Entry string
	// Stream is the type of a launcher's stream parameter.
	Stream string
	// Launch prints the launch of kernel over grid blocks of block threads
	// with smem bytes of dynamic shared memory on stream (the argument
	// list joined by ", "), without the semicolon.
	Launch func(kernel, grid string, block, smem int, stream, args string) string
	// SetShared is the format of the call that lets kernel (argument: its
	// name) use that many bytes (argument: an int) of dynamic shared memory;
	// it returns 0 on success.
	SetShared string
	// Alloc is the format of an allocation of device memory into the
	// pointer lvalue (arguments: its name, the byte count as a size_t
	// expression, the stream); it returns 0 on success. Free's format frees
	// it (arguments: name, stream).
	Alloc, Free string
	// LastError is an int expression: the runtime's error since it was
	// last read (0 if none), which it clears.
	LastError string
}
