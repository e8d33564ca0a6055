// Package cpurt builds generated .ll files into shared libraries with the
// LLVM 14 tools and loads them through a small cgo dlopen shim, for tests and
// `attnc verify`. It imports ir only. With $ATTNC_RECORD_OBJECTS it keeps
// every object it compiles; with $ATTNC_REPLAY_OBJECTS it links those
// objects on a machine without LLVM (replay.go).
//
// For another architecture (ToolchainFor("aarch64-unknown-linux-gnu")) it
// cross-compiles with opt/llc -mtriple and the target's gcc, and runs the
// library in a small runner program under the target's user-mode emulator
// (qemu-aarch64 -L /usr/aarch64-linux-gnu): Remote forwards calls and
// memory to it over a pipe (see remote/runner.c for the protocol).
//
// A kernel is called through a trampoline that passes 24 int64 arguments
// (unused ones 0). On x86-64 SysV this is correct for every function whose
// parameters are all pointers or 32-bit integers, which holds for all attnc
// CPU entry points: an i32 parameter reads the low half of its register or
// stack slot. Buffers come from mmap and end exactly at a PROT_NONE guard page,
// so a kernel that reads past the end of an argument crashes instead of
// passing silently.
package cpurt
