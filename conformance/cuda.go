package conformance

import (
	"github.com/attnc/attnc/ir"
)

// BuildCUDA prints v's CUDA source, compiles it as C++ against the CUDA
// emulator (one fiber per CUDA thread) into a shared library in dir and
// loads it: the same launchers a GPU build exposes, run on the CPU.
func BuildCUDA(v *ir.Variant, dir string) (*Suite, error) { return BuildCUDAWith(v, dir, Options{}) }

// BuildCUDAWith is BuildCUDA with options.
func BuildCUDAWith(v *ir.Variant, dir string, o Options) (*Suite, error) {
	return BuildFor(v, "cuda", dir, o)
}
