package hip

import (
	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/hip/isa"
)

// Clang locates clang++ 19 (the one the CUDA target uses: $ATTNC_CLANG,
// clang++-19 on PATH, /usr/lib/llvm-19/bin/clang++).
func Clang() (string, error) { return cuda.ClangCUDA() }

// CompileEmulated compiles hipPath (a .hip that starts with Prelude) as C++
// for the CPU emulator into the shared library soPath, exactly as
// cuda.CompileEmulated does for a .cu: the prelude selects 64-lane warps.
func CompileEmulated(hipPath, soPath string, extra ...string) error {
	return cuda.CompileEmulated(hipPath, soPath, extra...)
}

// EmulatorIdentity identifies the compiler CompileEmulated builds with
// (cuda.EmulatorIdentity: the same g++, flags and header).
func EmulatorIdentity() string { return cuda.EmulatorIdentity() }

// CompileISA compiles hipPath to AMDGPU assembly for arch ("gfx942") with
// clang-19 and no ROCm installation (isa.Flags) and returns its kernels.
func CompileISA(hipPath, asmPath, arch string) ([]isa.Kernel, error) {
	clang, err := Clang()
	if err != nil {
		return nil, err
	}
	return isa.Compile(clang, hipPath, asmPath, arch)
}
