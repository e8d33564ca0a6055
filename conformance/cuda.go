package conformance

import (
	"path/filepath"

	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
)

// BuildCUDA prints v's CUDA source, compiles it as C++ against the CUDA
// emulator (one fiber per CUDA thread) into a shared library in dir and
// loads it: the same launchers a GPU build exposes, run on the CPU.
func BuildCUDA(v *ir.Variant, dir string) (*Suite, error) { return BuildCUDAWith(v, dir, Options{}) }

// BuildCUDAWith is BuildCUDA with options.
func BuildCUDAWith(v *ir.Variant, dir string, o Options) (*Suite, error) {
	cu, gm, err := writeCUDA(v, dir, o)
	if err != nil {
		return nil, err
	}
	so := filepath.Join(dir, v.Name+".emu.so")
	if err := cuda.CompileEmulated(cu, so, o.Link...); err != nil {
		return nil, err
	}
	lib, err := cpurt.Open(so)
	if err != nil {
		return nil, err
	}
	return &Suite{V: v, Target: "cuda", Prefix: gm.Prefix, Lib: lib, Entries: launcherEntries(gm)}, nil
}
