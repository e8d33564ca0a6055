package cuda

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	cudagen "github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets/gpu/host"
)

// SASSRow is one CUDA device kernel's machine code for one architecture,
// with the launch the manifest records for it and the occupancy that
// launch gets.
type SASSRow struct {
	Variant string
	Role    string // the manifest's role (prefill, decode, merge_state, ...)
	DType   string // the variant's storage dtype
	Block   int    // threads per block (manifest launch.block)
	DynSmem int    // dynamic shared memory bytes (manifest launch.smem)
	// The manifest's launch bound: the register budget and the blocks per
	// SM it guarantees on this architecture (0 when it states none).
	MaxRegisters, MinBlocks int
	sass.Kernel
	Occupancy sass.Occupancy
}

// SASS compiles v's CUDA source cu to PTX with clang-19
// (codegen/cuda.CompilePTX) for each architecture, assembles and
// disassembles it (sass.Assemble) in dir, and returns one row per device
// kernel and architecture, ordered by kernel name, then architecture.
// kernels are the manifest's kernels of v on this target:
// every device kernel among them must come out of ptxas, and nothing else.
func SASS(v *ir.Variant, cu []byte, kernels []registry.KernelManifest, archs []string, tools sass.Tools, dir string) ([]SASSRow, error) {
	for _, a := range archs {
		if _, ok := sass.Archs[a]; !ok {
			return nil, fmt.Errorf("sass: unknown architecture %q (known: %s)", a, strings.Join(sass.ArchNames(), ", "))
		}
	}
	if cu == nil {
		return nil, fmt.Errorf("sass: no %s.cu in the build (build with the cuda target)", v.Name)
	}
	manifest, err := host.Launches("sass", v, kernels, "cuda")
	if err != nil {
		return nil, err
	}
	launches := map[string]SASSRow{}
	guaranteed := map[string]map[string]registry.OccupancyManifest{}
	for sym, k := range manifest {
		launches[sym] = SASSRow{Variant: v.Name, Role: k.Role, DType: v.DType.String(), Block: k.Launch.Block,
			DynSmem: k.Launch.Smem, MaxRegisters: k.Launch.MaxRegisters}
		guaranteed[sym] = k.Launch.Occupancy
	}
	cuPath := filepath.Join(dir, v.Name+".cu")
	if err := os.WriteFile(cuPath, cu, 0o644); err != nil {
		return nil, err
	}
	var rows []SASSRow
	for _, arch := range archs {
		base := filepath.Join(dir, v.Name+"."+arch)
		if err := CompilePTX(cuPath, base+".ptx", arch); err != nil {
			return nil, err
		}
		ks, err := Assemble(tools, base+".ptx", arch, base+".cubin")
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, k := range ks {
			r, ok := launches[k.Name]
			if !ok {
				return nil, fmt.Errorf("sass: %s: ptxas compiled the kernel %s, which the manifest does not list", v.Name, k.Name)
			}
			seen[k.Name] = true
			r.Kernel = k
			r.MinBlocks = guaranteed[k.Name][arch].BlocksPerSM
			r.Occupancy, err = sass.Archs[arch].Occupancy(k.Registers, k.StaticSmem, r.Block, r.DynSmem)
			if err != nil {
				return nil, fmt.Errorf("sass: %s %s: %w", k.Name, arch, err)
			}
			rows = append(rows, r)
		}
		for name := range launches {
			if !seen[name] {
				return nil, fmt.Errorf("sass: %s: no %s code for the manifest's kernel %s", v.Name, arch, name)
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

// CompilePTX is codegen/cuda.CompilePTX, which SASS calls; tests that
// compile the same sources for their PTX and SASS checks may share one
// compile per source and architecture through it.
var CompilePTX = cudagen.CompilePTX

// Assemble is sass.Assemble, which SASS calls; tests that assemble the
// same PTX in several places may share one ptxas and cuobjdump run per PTX
// and architecture through it.
var Assemble = sass.Assemble

// WriteSASSTable writes rows as an aligned table: per kernel and
// architecture the registers, stack frame, spill stores/loads (bytes),
// static+dynamic shared memory, threads per block, occupancy (blocks per
// SM, resident warps and what limits them), the counts of every
// sass.Families opcode family and all instructions.
func WriteSASSTable(w io.Writer, rows []SASSRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	head := []string{"kernel", "arch", "regs", "stack", "spill", "smem", "block", "blk/SM", "warps", "limit"}
	head = append(head, sass.Families...)
	head = append(head, "insns")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		cells := []string{
			r.Name, r.Arch, fmt.Sprint(r.Registers), fmt.Sprint(r.StackFrame),
			fmt.Sprintf("%d/%d", r.SpillStores, r.SpillLoads),
			fmt.Sprintf("%d+%d", r.StaticSmem, r.DynSmem), fmt.Sprint(r.Block),
			fmt.Sprint(r.Occupancy.BlocksPerSM),
			fmt.Sprintf("%d(%.0f%%)", r.Occupancy.WarpsPerSM, 100*r.Occupancy.Fraction),
			strings.Join(shortLimiters(r.Occupancy.Limiters), "+"),
		}
		for _, f := range sass.Families {
			cells = append(cells, fmt.Sprint(r.Count(f)))
		}
		cells = append(cells, fmt.Sprint(r.Instructions))
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return tw.Flush()
}

func shortLimiters(ls []string) []string {
	short := map[string]string{"warps": "warps", "registers": "regs", "shared memory": "smem", "blocks": "blocks"}
	var out []string
	for _, l := range ls {
		out = append(out, short[l])
	}
	return out
}

// SASSTarget is one of issue 11's static targets for the CUDA kernels'
// machine code.
type SASSTarget struct {
	Name    string
	Applies func(r SASSRow) bool
	Met     func(r SASSRow) bool
}

func isHalf(r SASSRow) bool { return r.DType == "f16" || r.DType == "bf16" }

// SASSTargets are issue 11's targets: every kernel assembles with zero
// spills and a zero stack frame; every f16/bf16 prefill stages with
// cp.async (LDGSTS), reads fragments with ldmatrix (LDSM), multiplies on
// tensor cores (HMMA) and touches no local memory (LDL/STL); decode loads
// with cp.async or 128-bit global loads.
var SASSTargets = []SASSTarget{
	{"zero spills", func(SASSRow) bool { return true },
		func(r SASSRow) bool { return r.SpillStores == 0 && r.SpillLoads == 0 }},
	{"zero stack frame", func(SASSRow) bool { return true },
		func(r SASSRow) bool { return r.StackFrame == 0 }},
	{"f16/bf16 prefill has LDGSTS", func(r SASSRow) bool { return r.Role == "prefill" && isHalf(r) },
		func(r SASSRow) bool { return r.Count("LDGSTS") > 0 }},
	{"f16/bf16 prefill has LDSM", func(r SASSRow) bool { return r.Role == "prefill" && isHalf(r) },
		func(r SASSRow) bool { return r.Count("LDSM") > 0 }},
	{"f16/bf16 prefill has HMMA", func(r SASSRow) bool { return r.Role == "prefill" && isHalf(r) },
		func(r SASSRow) bool { return r.Count("HMMA") > 0 }},
	{"f16/bf16 prefill has no LDL/STL", func(r SASSRow) bool { return r.Role == "prefill" && isHalf(r) },
		func(r SASSRow) bool { return r.Count("LDL")+r.Count("STL") == 0 }},
	{"decode has LDGSTS or LDG.128", func(r SASSRow) bool { return r.Role == "decode" },
		func(r SASSRow) bool { return r.Count("LDGSTS")+r.Count("LDG.128") > 0 }},
	{"registers within the manifest's launch bound", func(r SASSRow) bool { return r.MaxRegisters > 0 },
		func(r SASSRow) bool { return r.Registers <= r.MaxRegisters }},
	{"occupancy at least the manifest's", func(r SASSRow) bool { return r.MinBlocks > 0 },
		func(r SASSRow) bool { return r.Occupancy.BlocksPerSM >= r.MinBlocks }},
}

// CheckSASS returns one line per row and SASSTarget it applies to but
// does not meet: "<kernel> <arch>: <target> (<figures>)".
func CheckSASS(rows []SASSRow) []string {
	var out []string
	for _, r := range rows {
		for _, t := range SASSTargets {
			if t.Applies(r) && !t.Met(r) {
				out = append(out, fmt.Sprintf("%s %s: %s (stack %d, spills %d/%d, LDGSTS %d, LDSM %d, HMMA %d, LDL %d, STL %d, LDG.128 %d, registers %d of %d, %d blocks per SM of %d)",
					r.Name, r.Arch, t.Name, r.StackFrame, r.SpillStores, r.SpillLoads, r.Count("LDGSTS"), r.Count("LDSM"),
					r.Count("HMMA"), r.Count("LDL"), r.Count("STL"), r.Count("LDG.128"), r.Registers, r.MaxRegisters,
					r.Occupancy.BlocksPerSM, r.MinBlocks))
			}
		}
	}
	return out
}
