package hip

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/attnc/attnc/codegen/cuda"
	hipgen "github.com/attnc/attnc/codegen/hip"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/gpu/host"
)

// The HIP target's optional hooks (package targets): the compute units of
// a call, the harness (the .hip compiled against the CPU emulator with
// 64-lane warps) and the machine-code check behind attnc isa.

// MaxCUs is the most compute units a shape may give: the launchers run
// 2 x CUs workers in an int.
const MaxCUs = 1 << 16

// Workers implements targets.WorkerCount: the GPU's compute units, given
// as sms.
func (Target) Workers() targets.Workers {
	return targets.Workers{Flag: "sms", Max: MaxCUs, Why: "a GPU's compute units", Default: DefaultCUs}
}

// HarnessTools implements targets.Harness: g++ for the emulator.
func (Target) HarnessTools(opt targets.Options) error {
	if _, err := cuda.GXX(); err != nil {
		return fmt.Errorf("the HIP emulator needs g++: %w", err)
	}
	return nil
}

// HostLibrary implements targets.Harness: the .hip compiled as C++ against
// the emulator with 64-lane warps (one fiber per work-item), the same
// launchers a GPU build exposes, run on the CPU.
func (Target) HostLibrary(v *ir.Variant, m *ir.Module, dir string, opt targets.Options, link []string) (targets.HostLibrary, error) {
	so := filepath.Join(dir, v.Name+".hip.emu.so")
	if err := hipgen.CompileEmulated(filepath.Join(dir, v.Name+".hip"), so, link...); err != nil {
		return targets.HostLibrary{}, err
	}
	return targets.HostLibrary{Path: so}, nil
}

// HostBuildIdentity implements targets.HostBuildIdentity: the HIP
// emulator's compiler, flags and header (hipgen.EmulatorIdentity).
func (Target) HostBuildIdentity() string { return hipgen.EmulatorIdentity() }

// Entries implements targets.Harness: the host launchers of the public
// plans, each with a trailing stream.
func (Target) Entries(m *ir.Module) []targets.Entry { return host.Entries(m) }

// MachineCommand implements targets.MachineCode: attnc isa.
func (Target) MachineCommand() targets.MachineCommand {
	return targets.MachineCommand{
		Name:  "isa",
		Use:   "isa SPEC... [--arch gfx942] [--check]",
		Short: "Compile each variant's HIP kernels for AMD GPUs with clang and tabulate the machine code",
		Long: `Build the HIP kernels of every supported variant, compile them to AMDGPU
assembly with clang-19 for each --arch (no ROCm installation: the .hip
carries its own prelude) and read each kernel's code object metadata and
instructions. Per variant, one line per kernel and architecture:

  vgpr agpr sgpr  vector registers per work-item (the unified count; agpr:
                  the accumulation registers among them), scalar registers
  scratch         private segment bytes per work-item
  spill           VGPRs/SGPRs spilled
  lds             static + dynamic LDS bytes per workgroup (the manifest's launch)
  block           work-items per workgroup (the manifest's launch)
  grp/CU          workgroups of that launch resident on one CU, wavefronts
                  (and the share of the 32 slots), and what limits them
                  (waves, VGPRs, SGPRs, LDS, workgroups)
  v_mfma ... scratch_store
                  instruction counts: MFMA (all, f16, bf16), LDS reads and
                  writes, wavefront permutes, barriers, 128-bit global
                  loads, scratch loads and stores
  insns           all instructions

--check also tests the targets the HIP kernels are built towards (no
scratch and no VGPR or SGPR spills in any kernel; MFMA in every f16/bf16
prefill whose work items have 16 rows, MFMA's M; VGPRs within the manifest
launch's max_registers and occupancy at least its occupancy), prints
"target not met: ..." for each one missed and exits with status 1 if any
is, else prints "all targets met".

Needs clang-19 only; no GPU. Variants using features that do not generate
kernels yet are reported as "skip <variant>: <reason>".`,
		Example: `  attnc isa examples/llama3_8b.attn
  attnc isa examples/*.attn --check`,
		Archs:        archNames(),
		DefaultArchs: []string{"gfx942"},
	}
}

// MachineTools implements targets.MachineCode: clang-19.
func (Target) MachineTools() (targets.MachineTools, error) {
	clang, err := hipgen.Clang()
	if err != nil {
		return nil, err
	}
	return isaTools{clang}, nil
}

// isaTools is the found clang.
type isaTools struct{ clang string }

// Describe implements targets.MachineTools.
func (t isaTools) Describe() string { return "clang=" + filepath.Base(t.clang) }

// Check implements targets.MachineTools: the ISA table of v's kernels and
// the machine-code targets (ISATargets) they miss.
func (t isaTools) Check(w io.Writer, v *ir.Variant, files []targets.Artifact, kernels []registry.KernelManifest, archs []string, dir string) ([]string, error) {
	var src []byte
	for _, f := range files {
		if f.Name == v.Name+".hip" {
			src = f.Data
		}
	}
	rows, err := ISA(v, src, kernels, archs, dir)
	if err != nil {
		return nil, err
	}
	if err := WriteISATable(w, rows); err != nil {
		return nil, err
	}
	return CheckISA(rows), nil
}

var (
	_ targets.WorkerCount = Target{}
	_ targets.Harness     = Target{}
	_ targets.MachineCode = Target{}
)
