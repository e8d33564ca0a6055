// Package cuda prints legalized GPU kernel IR as CUDA C++: extern "C"
// __global__ kernels (the C-style core of codegen/cstyle with CUDA's
// Dialect; blocks, threads, shared memory, shuffles and tensor-core
// fragments were decided by the CUDA target's schedule passes) and, from
// the module's plans, a host launcher per public entry. It owns the
// prelude that lets one .cu compile with nvcc, with clang-19 without CUDA
// headers (to PTX), and as C++ against the CPU emulator in emu/, and the
// helpers that run those compilers for tests.
//
// cuda imports ir and codegen/cstyle only; it must not import frontend, lower, passes or
// registry.
package cuda
