// Package hip owns HIP C++ for AMD GPUs (CDNA3, gfx942: wavefronts of 64
// lanes, MFMA matrix instructions): the prelude that lets one generated .hip
// compile with the HIP headers, with clang-19 without any ROCm file (to
// AMDGPU code), and as C++ against the CPU emulator of codegen/cuda with
// 64-lane warps, and the helpers that run those compilers.
//
// The printer is codegen/cstyle with this package's Dialect.
//
// hip imports ir, codegen/cstyle and codegen/cuda (the emulator and the
// compiler lookups); it must not import frontend, lower, passes or
// registry.
package hip
