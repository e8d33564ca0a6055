package conformance

import (
	"os"
	"path/filepath"

	"github.com/attnc/attnc/build"
	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// BuildCUDA prints v's CUDA source, compiles it as C++ against the CUDA
// emulator (one fiber per CUDA thread) into a shared library in dir and
// loads it: the same launchers a GPU build exposes, run on the CPU.
func BuildCUDA(v *ir.Variant, dir string) (*Suite, error) {
	gm, err := build.CompileGPU(v, passes.Options{VerifyEach: true})
	if err != nil {
		return nil, err
	}
	src, err := cuda.Emit(gm.Module, gm.Launchers)
	if err != nil {
		return nil, err
	}
	cu := filepath.Join(dir, v.Name+".cu")
	if err := os.WriteFile(cu, []byte(src), 0o644); err != nil {
		return nil, err
	}
	so := filepath.Join(dir, v.Name+".emu.so")
	if err := cuda.CompileEmulated(cu, so); err != nil {
		return nil, err
	}
	lib, err := cpurt.Open(so)
	if err != nil {
		return nil, err
	}
	es := map[ir.Role]Entry{}
	for _, l := range gm.Launchers {
		es[l.Role] = Entry{Symbol: l.Name, Params: l.Params, Stream: true}
	}
	return &Suite{V: v, Target: "cuda", Prefix: gm.Module.Prefix, Lib: lib, Entries: es}, nil
}
