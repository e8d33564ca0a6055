package cuda

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	cudagen "github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/gpu/host"
)

// The CUDA target's optional hooks (package targets): the multiprocessors
// of a call, the harness (the .cu compiled against the CPU emulator, or
// by nvcc for a GPU) and the machine-code check behind attnc sass.

// MaxSMs is the most multiprocessors a shape may give: the launchers run
// 2 x SMs workers of 128 threads in an int.
const MaxSMs = 1 << 16

// Workers implements targets.WorkerCount: the GPU's multiprocessors.
func (Target) Workers() targets.Workers {
	return targets.Workers{Flag: "sms", Max: MaxSMs, Why: "a GPU's multiprocessors", Default: DefaultSMs}
}

// HarnessTools implements targets.Harness: g++ for the CUDA emulator.
func (Target) HarnessTools(opt targets.Options) error {
	if _, err := cudagen.GXX(); err != nil {
		return fmt.Errorf("the CUDA emulator needs g++: %w", err)
	}
	return nil
}

// HostLibrary implements targets.Harness: the .cu compiled as C++ against
// the CUDA emulator (one fiber per CUDA thread), the same launchers a GPU
// build exposes, run on the CPU.
func (Target) HostLibrary(v *ir.Variant, m *ir.Module, dir string, opt targets.Options, link []string) (targets.HostLibrary, error) {
	so := filepath.Join(dir, v.Name+".emu.so")
	if err := cudagen.CompileEmulated(filepath.Join(dir, v.Name+".cu"), so, link...); err != nil {
		return targets.HostLibrary{}, err
	}
	return targets.HostLibrary{Path: so}, nil
}

// HostBuildIdentity implements targets.HostBuildIdentity: the CUDA
// emulator's compiler, flags and header (cudagen.EmulatorIdentity).
func (Target) HostBuildIdentity() string { return cudagen.EmulatorIdentity() }

// Entries implements targets.Harness: the host launchers of the public
// plans, each with a trailing stream.
func (Target) Entries(m *ir.Module) []targets.Entry { return host.Entries(m) }

// MachineCommand implements targets.MachineCode: attnc sass.
func (Target) MachineCommand() targets.MachineCommand {
	return targets.MachineCommand{
		Name:  "sass",
		Use:   "sass SPEC... [--arch sm_80,sm_90] [--check]",
		Short: "Assemble each variant's CUDA kernels with ptxas and tabulate the machine code",
		Long: `Build the CUDA kernels of every supported variant, compile them to PTX with
clang-19, assemble the PTX with NVIDIA's ptxas for each --arch and read the
machine code (SASS) back with cuobjdump. Per variant, one line per kernel
and architecture:

  regs     registers per thread
  stack    stack frame bytes per thread (local memory)
  spill    spill stores/loads, bytes per thread
  smem     static + dynamic shared memory bytes per block (the manifest's launch)
  block    threads per block (the manifest's launch)
  blk/SM   blocks of that launch resident on one SM, warps (and the share of
           the 64 warp slots), and what limits them (warps, regs, smem,
           blocks): computed from the architecture's per-SM limits
  LDGSTS LDSM HMMA LDL STL LDG.128 LDS.U16 BAR SHFL
           instruction counts: cp.async, ldmatrix, tensor-core mma, local
           loads/stores, 128-bit global loads, 16-bit shared loads,
           barriers, warp shuffles
  insns    all instructions

--check also tests the targets the CUDA kernels are built towards (no
spills and no stack frame in any kernel; LDGSTS, LDSM and HMMA and no
LDL/STL in every f16/bf16 prefill; LDGSTS or LDG.128 in decode; registers
within the manifest launch's max_registers and occupancy at least its
occupancy), prints
"target not met: ..." for each one missed and exits with status 1 if any
is, else prints "all targets met".

Needs clang-19 and ptxas/cuobjdump from CUDA 11.8 or newer:
scripts/fetch-ptxas.sh unpacks them from Debian's non-free archive into
~/.cache/attnc/cuda-tools, where attnc finds them ($ATTNC_PTXAS and
$ATTNC_CUOBJDUMP, PATH and /usr/local/cuda/bin are searched too). No GPU is
needed. Variants using features that do not generate kernels yet are
reported as "skip <variant>: <reason>".`,
		Example: `  attnc sass examples/llama3_8b.attn
  attnc sass examples/*.attn --arch sm_90
  attnc sass examples/*.attn --check`,
		Archs:        sass.ArchNames(),
		DefaultArchs: []string{"sm_80", "sm_90"},
	}
}

// MachineTools implements targets.MachineCode: clang-19 for the PTX,
// ptxas and cuobjdump for the SASS.
func (Target) MachineTools() (targets.MachineTools, error) {
	if _, err := cudagen.ClangCUDA(); err != nil {
		return nil, err
	}
	tools, err := sass.FindTools()
	if err != nil {
		return nil, err
	}
	return sassTools{tools}, nil
}

// sassTools are the found ptxas and cuobjdump.
type sassTools struct{ sass.Tools }

// Describe implements targets.MachineTools.
func (t sassTools) Describe() string { return "ptxas=" + t.Release }

// Check implements targets.MachineTools: the SASS table of v's kernels
// and the machine-code targets (SASSTargets) they miss.
func (t sassTools) Check(w io.Writer, v *ir.Variant, files []targets.Artifact, kernels []registry.KernelManifest, archs []string, dir string) ([]string, error) {
	var cu []byte
	for _, f := range files {
		if f.Name == v.Name+".cu" {
			cu = f.Data
		}
	}
	rows, err := SASS(v, cu, kernels, archs, t.Tools, dir)
	if err != nil {
		return nil, err
	}
	if err := WriteSASSTable(w, rows); err != nil {
		return nil, err
	}
	return CheckSASS(rows), nil
}

// DeviceRuntime implements targets.DeviceHarness: libcudart (.so, .so.13,
// .so.12 or .so.11.0), from the loader's path, $CUDA_HOME/lib64, $CUDA_PATH/lib64
// or /usr/local/cuda/lib64.
func (Target) DeviceRuntime() targets.DeviceRuntime {
	var dirs []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if d := os.Getenv(env); d != "" {
			dirs = append(dirs, filepath.Join(d, "lib64"))
		}
	}
	return targets.DeviceRuntime{Name: "CUDA", Prefix: "cuda",
		Libs:    []string{"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"},
		Dirs:    append(dirs, "/usr/local/cuda/lib64"),
		Install: "install the CUDA toolkit or add its lib64 to LD_LIBRARY_PATH"}
}

// DeviceTools implements targets.DeviceHarness: nvcc.
func (Target) DeviceTools() (string, error) { return cudagen.FindNVCC() }

// DeviceLibrary implements targets.DeviceHarness: the .cu compiled by
// nvcc (codegen/cuda.CompileNVCC) into a library that launches on the GPU.
func (Target) DeviceLibrary(v *ir.Variant, m *ir.Module, dir, compiler string) (string, error) {
	so := filepath.Join(dir, v.Name+".gpu.so")
	if err := cudagen.CompileNVCC(compiler, filepath.Join(dir, v.Name+".cu"), so); err != nil {
		return "", err
	}
	return so, nil
}

var (
	_ targets.WorkerCount   = Target{}
	_ targets.DeviceHarness = Target{}
	_ targets.MachineCode   = Target{}
)
