package hip

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	hipgen "github.com/attnc/attnc/codegen/hip"
	"github.com/attnc/attnc/codegen/hip/isa"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets/gpu/host"
)

// ISARow is one HIP device kernel's machine code for one architecture,
// with the launch the manifest records for it and the occupancy that
// launch gets.
type ISARow struct {
	Variant string
	Role    string // the manifest's role
	DType   string // the variant's storage dtype
	Block   int    // work-items per workgroup (manifest launch.block)
	DynLDS  int    // dynamic LDS bytes (manifest launch.smem)
	// The manifest's launch bound: the VGPR budget and the workgroups per
	// CU it guarantees on this architecture (0 when it states none).
	MaxVGPRs, MinGroups int
	// ItemRows is the rows of a work item in the tiling the target lowered
	// the variant with (FitTiling): MFMA takes items of 16 rows (its M).
	ItemRows int
	isa.Kernel
	Occupancy isa.Occupancy
}

// ISA compiles v's HIP source src to AMDGPU assembly with clang-19 for
// each architecture (in dir) and returns one row per device kernel and
// architecture, ordered by kernel name, then architecture. kernels are
// the manifest's kernels of v on this target: every device kernel among
// them must come out of the compiler, and nothing else.
func ISA(v *ir.Variant, src []byte, kernels []registry.KernelManifest, archs []string, dir string) ([]ISARow, error) {
	for _, a := range archs {
		if _, ok := isa.Archs[a]; !ok {
			return nil, fmt.Errorf("isa: unknown architecture %q (known: %s)", a, strings.Join(archNames(), ", "))
		}
	}
	if src == nil {
		return nil, fmt.Errorf("isa: no %s.hip in the build (build with the hip target)", v.Name)
	}
	manifest, err := host.Launches("isa", v, kernels, "hip")
	if err != nil {
		return nil, err
	}
	launches := map[string]ISARow{}
	guaranteed := map[string]map[string]registry.OccupancyManifest{}
	itemRows := FitTiling(v).Rows
	for sym, k := range manifest {
		launches[sym] = ISARow{Variant: v.Name, Role: k.Role, DType: v.DType.String(), Block: k.Launch.Block,
			DynLDS: k.Launch.Smem, MaxVGPRs: k.Launch.MaxRegisters, ItemRows: itemRows}
		guaranteed[sym] = k.Launch.Occupancy
	}
	path := filepath.Join(dir, v.Name+".hip")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		return nil, err
	}
	var rows []ISARow
	for _, arch := range archs {
		ks, err := hipgen.CompileISA(path, filepath.Join(dir, v.Name+"."+arch+".s"), arch)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, k := range ks {
			r, ok := launches[k.Name]
			if !ok {
				return nil, fmt.Errorf("isa: %s: clang compiled the kernel %s, which the manifest does not list", v.Name, k.Name)
			}
			seen[k.Name] = true
			r.Kernel = k
			r.MinGroups = guaranteed[k.Name][arch].BlocksPerSM
			r.Occupancy, err = isa.Archs[arch].Occupancy(k.VGPRs, k.SGPRs, k.LDS, r.Block, r.DynLDS)
			if err != nil {
				return nil, fmt.Errorf("isa: %s %s: %w", k.Name, arch, err)
			}
			rows = append(rows, r)
		}
		for name := range launches {
			if !seen[name] {
				return nil, fmt.Errorf("isa: %s: no %s code for the manifest's kernel %s", v.Name, arch, name)
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

func archNames() []string {
	var ns []string
	for n := range isa.Archs {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// WriteISATable writes rows as an aligned table: per kernel and
// architecture the VGPRs (of which AGPRs), SGPRs, scratch bytes, VGPR and
// SGPR spills, static+dynamic LDS, work-items per workgroup, occupancy
// (workgroups per CU, wavefronts per CU and what limits them), the counts
// of every isa.Families group and all instructions.
func WriteISATable(w io.Writer, rows []ISARow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	head := []string{"kernel", "arch", "vgpr", "agpr", "sgpr", "scratch", "spill", "lds", "block", "grp/CU", "waves", "limit"}
	head = append(head, isa.Families...)
	head = append(head, "insns")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		cells := []string{
			r.Name, r.Arch, fmt.Sprint(r.VGPRs), fmt.Sprint(r.AGPRs), fmt.Sprint(r.SGPRs), fmt.Sprint(r.Scratch),
			fmt.Sprintf("%d/%d", r.VGPRSpills, r.SGPRSpills),
			fmt.Sprintf("%d+%d", r.LDS, r.DynLDS), fmt.Sprint(r.Block),
			fmt.Sprint(r.Occupancy.GroupsPerCU),
			fmt.Sprintf("%d(%.0f%%)", r.Occupancy.WavesPerCU, 100*r.Occupancy.Fraction),
			strings.Join(r.Occupancy.Limiters, "+"),
		}
		for _, f := range isa.Families {
			cells = append(cells, fmt.Sprint(r.Count(f)))
		}
		cells = append(cells, fmt.Sprint(r.Instructions))
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return tw.Flush()
}

// ISATarget is one static target for the HIP kernels' machine code.
type ISATarget struct {
	Name    string
	Applies func(r ISARow) bool
	Met     func(r ISARow) bool
}

// ISATargets are the HIP kernels' targets: no scratch (no private
// segment, no dynamic stack) and no spills in any kernel (VGPR spills go to
// scratch; SGPR spills go to lanes of a VGPR, or to scratch when none is
// free); MFMA in every f16/bf16 prefill whose work items have 16 rows
// (MFMA's M: a variant whose 16-row schedule does not fit the LDS is tiled
// with 8 or 4 rows, and its matmuls run on the vector ALUs); VGPRs within
// the manifest's launch bound and occupancy at least the manifest's.
var ISATargets = []ISATarget{
	{"no scratch", func(ISARow) bool { return true },
		func(r ISARow) bool { return r.Scratch == 0 && !r.DynamicStack }},
	{"zero VGPR spills", func(ISARow) bool { return true },
		func(r ISARow) bool { return r.VGPRSpills == 0 }},
	{"zero SGPR spills", func(ISARow) bool { return true },
		func(r ISARow) bool { return r.SGPRSpills == 0 }},
	{"f16/bf16 prefill on 16-row items has MFMA", func(r ISARow) bool {
		return r.Role == "prefill" && (r.DType == "f16" || r.DType == "bf16") && r.ItemRows == mfmaM
	},
		func(r ISARow) bool { return r.Count("v_mfma") > 0 }},
	{"VGPRs within the manifest's launch bound", func(r ISARow) bool { return r.MaxVGPRs > 0 },
		func(r ISARow) bool { return r.VGPRs <= r.MaxVGPRs }},
	{"occupancy at least the manifest's", func(r ISARow) bool { return r.MinGroups > 0 },
		func(r ISARow) bool { return r.Occupancy.GroupsPerCU >= r.MinGroups }},
}

// CheckISA returns one line per row and ISATarget it applies to but does
// not meet: "<kernel> <arch>: <target> (<figures>)".
func CheckISA(rows []ISARow) []string {
	var out []string
	for _, r := range rows {
		for _, t := range ISATargets {
			if t.Applies(r) && !t.Met(r) {
				out = append(out, fmt.Sprintf("%s %s: %s (scratch %d, spills %d/%d, MFMA %d, VGPRs %d of %d, %d workgroups per CU of %d)",
					r.Name, r.Arch, t.Name, r.Scratch, r.VGPRSpills, r.SGPRSpills, r.Count("v_mfma"), r.VGPRs, r.MaxVGPRs,
					r.Occupancy.GroupsPerCU, r.MinGroups))
			}
		}
	}
	return out
}
