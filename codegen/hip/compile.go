package hip

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/attnc/attnc/codegen/cuda"
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

var archRE = regexp.MustCompile(`^gfx9(4[0-2]|0a)$`)

// ISAFlags returns the clang flags CompileISA uses for arch (gfx942, or
// the other CDNA parts with the same MFMA instructions: gfx940, gfx941,
// gfx90a), without the input and output names.
func ISAFlags(arch string) ([]string, error) {
	if !archRE.MatchString(arch) {
		return nil, fmt.Errorf("hip: bad GPU architecture %q (want gfx942, or gfx940, gfx941, gfx90a)", arch)
	}
	return []string{"-x", "hip", "--offload-arch=" + arch, "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3", "-S"}, nil
}

// CompileISA compiles hipPath to AMDGPU assembly for arch with clang and no
// ROCm installation:
//
//	clang++-19 -x hip --offload-arch=<arch> -nogpulib -nogpuinc --cuda-device-only -O3 -S -o asmPath hipPath
//
// The error carries the compiler's output.
func CompileISA(hipPath, asmPath, arch string) error {
	flags, err := ISAFlags(arch)
	if err != nil {
		return err
	}
	clang, err := Clang()
	if err != nil {
		return err
	}
	cmd := exec.Command(clang, append(flags, "-o", asmPath, hipPath)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hip: %s %s: %v\n%s", filepath.Base(clang), strings.Join(cmd.Args[1:], " "), err,
			strings.TrimSpace(out.String()))
	}
	return nil
}
