package cpu

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets"
)

// Machine is the CPU target for one architecture, built per compile from
// the build's options: the triple resolved once in the Arches table, its
// levels typed values, and the levels the build clones for. The schedule
// passes that depend on the machine (multiversion, vector-reduce,
// block-matmul, native-widen) are closures over it, so none looks a triple
// or a level up by name in a global table, and the module carries no
// triple. A clone's ir.Kernel.Level names one of the machine's levels;
// Level resolves it in the machine's own table.
type Machine struct {
	Arch Arch
	// built are the indexes in Arch.Levels of the levels a build
	// restricted to (targets.Options.CPULevels), ascending; nil: every
	// level. Multiversion clones each work kernel at the best level at or
	// below each of them that the kernel can be cloned at.
	built []int
}

// NewMachine is the machine of triple ("" is DefaultTriple); an unknown
// triple is an error naming the known ones. levels, when not nil,
// restricts the clones to those levels of the triple (ResolveLevels: names
// and "host").
func NewMachine(triple string, levels ...string) (*Machine, error) {
	a, err := LookupArch(triple)
	if err != nil {
		return nil, err
	}
	mc := &Machine{Arch: a}
	if levels != nil {
		if mc.built, err = a.ResolveLevels(levels); err != nil {
			return nil, err
		}
	}
	return mc, nil
}

// Built are the names of the levels the machine clones for, baseline
// first: every level of the architecture unless the build restricted them.
func (mc *Machine) Built() []string {
	if mc.built == nil {
		return mc.Arch.LevelNames()
	}
	var out []string
	for _, i := range mc.built {
		out = append(out, mc.Arch.Levels[i].Name)
	}
	return out
}

// HostLevel is the name of the keyword that names the building machine's
// best level in a restriction of the levels (attnc build --cpu-levels
// host).
const HostLevel = "host"

// ResolveLevels are the indexes in a.Levels of the levels names lists,
// ascending, each once: a level's name, or HostLevel for the level the
// entries pick on the machine that runs this (hostLevel). An empty list,
// an unknown name, or HostLevel on a machine of another architecture is an
// error naming the known levels.
func (a Arch) ResolveLevels(names []string) ([]int, error) {
	known := strings.Join(append(a.LevelNames(), HostLevel), ", ")
	var out []int
	for _, n := range names {
		n = strings.TrimSpace(n)
		i := slices.IndexFunc(a.Levels, func(l Level) bool { return l.Name == n })
		if n == HostLevel {
			h, err := a.hostLevel()
			if err != nil {
				return nil, err
			}
			i = h
		}
		if i < 0 {
			return nil, fmt.Errorf("unknown CPU level %q for %s (known: %s)", n, a.Triple, known)
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CPU level given for %s (known: %s)", a.Triple, known)
	}
	slices.Sort(out)
	return out, nil
}

// defaultMachine is the machine of DefaultTriple: Table's and LevelTable's.
var defaultMachine = func() *Machine {
	mc, err := NewMachine(DefaultTriple)
	if err != nil {
		panic(err)
	}
	return mc
}()

// Level is the level of clone k, nil for a kernel that is not a clone; a
// level the machine's architecture lacks is an error.
func (mc *Machine) Level(k *ir.Kernel) (*Level, error) {
	if k.Level == "" {
		return nil, nil
	}
	for i := range mc.Arch.Levels {
		if mc.Arch.Levels[i].Name == k.Level {
			return &mc.Arch.Levels[i], nil
		}
	}
	return nil, fmt.Errorf("kernel %s: level %q is not a level of %s (known: %s)", k.Name, k.Level, mc.Arch.Triple, strings.Join(mc.Arch.LevelNames(), ", "))
}

// Table is the CPU pass table of this machine.
func (mc *Machine) Table() []passes.Pass {
	return mc.table(passes.Pass{Name: "multiversion", Required: true, Run: mc.Multiversion,
		Desc: "clone the work kernels per CPU level of the triple (x86-64, -v3, -v4, and -v4-bf16 for those with a bf16 Q·Kᵀ; NEON); entries dispatch by CPUID or ATTNC_CPU_LEVEL"})
}

// mapClones is m with each level clone's kernel replaced by f(k, its
// Level), the target-neutral kernels kept: the loop of every pass that
// fits a clone to its level; pass names the level lookup's errors.
func (mc *Machine) mapClones(m *ir.Module, pass string, f func(k *ir.Kernel, l *Level) *ir.Kernel) (*ir.Module, error) {
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		if k.Level == "" {
			out.Kernels = append(out.Kernels, k)
			continue
		}
		l, err := mc.Level(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pass, err)
		}
		out.Kernels = append(out.Kernels, f(k, l))
	}
	return &out, nil
}

// LevelTable is Table with the clone of the named level only
// (MultiversionAt: a kernel without a bf16 product is cloned at the best
// level below a DotBF16 one): tests that run the level their machine picks
// build with it, one clone instead of three or four. The entries return
// CPU_LEVEL on a CPU below the level. An unknown name is an error naming the known.
func (mc *Machine) LevelTable(name string) ([]passes.Pass, error) {
	for i, l := range mc.Arch.Levels {
		if l.Name == name {
			return mc.table(passes.Pass{Name: "multiversion", Required: true, Run: mc.MultiversionAt(i),
				Desc: "clone the work kernels for CPU level " + name + " only; entries return CPU_LEVEL below it"}), nil
		}
	}
	return nil, fmt.Errorf("%q is not a CPU level of %s (known: %s)", name, mc.Arch.Triple, strings.Join(mc.Arch.LevelNames(), ", "))
}

func (mc *Machine) table(multiversion passes.Pass) []passes.Pass {
	return []passes.Pass{
		passes.InlineDefsPass,
		passes.SimplifyPass,
		passes.ClassifyTilesPass,
		passes.ExpandCallsPass,
		{Name: "full-tiles", Required: false, Run: FullTiles,
			Desc: "the fully visible KV tiles of prefill and decode (classify-tiles' tile_full branch) only for tiles of all their positions (64 in prefill, TileRows in decode), whose extent becomes the constant: opt folds the trip counts; a shorter fully visible tile runs the masked body, whose mask hides nothing there"},
		multiversion,
		{Name: "exp-bound", Required: false, Run: mc.ExpBound,
			Desc: "the softmax weights' exp(s - m), m at least the max of s's row (a max reduce over the same elements just before, or, in decode's loop per phase, stored by a row loop in an array the exp loop reads back), as exp(min(s - m, 0)): the same values, which vector-exp computes without the overflow half of its polynomial"},
		{Name: "vector-reduce", Required: false, Run: mc.VectorReduce,
			Desc: "reduce statements of KV tiles (prefill's and decode's) as explicit vector loops of the clone's width and a shuffle tree"},
		{Name: "finite-codes", Required: false, Run: mc.FiniteCodes,
			Desc: "decode products reading e4m3 K/V codes in place (clones with native half conversion): the tile's rows checked for NaN codes first (a vector max over their bytes), and a copy that widens them without the NaN path (native-widen) for tiles that have none — at the AVX-512 levels, through f32 subnormals, only on a thread that does not read denormals as zero (rt.fp_daz)"},
		{Name: "block-matmul", Required: false, Run: mc.BlockMatMul,
			Desc: "tile matmuls of each level's clone as register-blocked vector micro-kernels (6x4 or 6x2 vectors of the level's width; prefill's Q·Kᵀ (M >= 32) on K packed transposed; on x86-64-v4-bf16, with exact bf16 Q and K, as vdpbf16ps on bf16 pairs; on x86-64-amx as AMX tdpbf16ps on 32x32 tile blocks, the staged bf16 K and V tiles kept bf16 for their packers), decode's Q·Kᵀ as dot-product blocks ending in a transpose-add tree; decode products over e4m3 codes in clones with native half conversion with the widening's 2^8 (2^120 in AVX-512 finite-codes tiles, A then scaled by 2^64) out of the loop (Q·Kᵀ over f16 queries: on each block's result; P·V: on the weights, once per tile)"},
		{Name: "lower-tiles", Required: true, Run: LowerTiles,
			Desc: "matmul and reduce statements as loops: dot products and zero-skipping row updates"},
		{Name: "vectorize", Required: true, Run: Vectorize,
			Desc: "spread loops as vector (innermost) or serial loops, guards folded into loop bounds"},
		{Name: "prefetch-kv", Required: false, Run: PrefetchKV,
			Desc: "fetch ahead the page rows of the staging iteration a decode tile ahead (TileRows: up to 32 KiB of K rows), in a later tile too (guards repeated: -1 pages never touched): rows read in place get their offsets recorded and prefetched a line at a time beside the products' loads, and a dot block's steps fetch the next block's K lines of the same tile from L2 into L1; copied rows, a prefetch per line at the head of the iteration"},
		{Name: "merge-twins", Required: false, Run: MergeTwins,
			Desc: "local arrays that provably hold the same values (every store to one follows a store of the same value at the same index to the other: decode's K and V row offsets over pools of one geometry, and their prefetch companions) as one array: half the staging's stores"},
		{Name: "vector-exp", Required: false, Run: VectorExp,
			Desc: "f32 exp as a polynomial in plain arithmetic (within 2 ulp; 0 below FLT_MIN, inf above; exp-bound's exp(min(x, 0)) without the overflow half), and f32 tanh (soft-capping) as a polynomial or through that exp (within 2 ulp): vectorized with its loop instead of a libm call per lane"},
		{Name: "native-widen", Required: false, Run: mc.NativeWiden,
			Desc: "f16 and fp8 (e4m3, e5m2) K/V/Q loads of the clones whose level converts half natively (F16C, NEON) through the dtype table's hardware conversion (fp8 codes rearranged into half bits first; e4m3's 2^8 left out where block-matmul folded it); at the AVX-512 levels e4m3 codes in finite-codes' tiles as f32 bits instead (sign-extended, shifted, masked: value / 2^120, its 2^120 left out where folded)"},
		passes.LegalizeDTypePass,
		passes.LateSimplifyPass,
		{Name: "vector-loops", Required: false, Run: mc.VectorLoops,
			Desc: "elementwise vector loops of a constant trip count that is a multiple of the clone's width (unit-stride loads and stores at the loop variable, values that do not change with it, ifs that only assign) as explicit vector code, which LLVM's loop vectorizer misses when GVN moves a loop's first load into its backedge (decode's softmax exp over one row)"},
		passes.HeapScratchPass,
	}
}

// Bind implements targets.Binder: table with its CPU passes — those of a
// machine's Table or LevelTable, known by name and description, not
// inserted by a user — run on the machine of opt.Triple and opt.CPULevels
// (Table's multiversion clones at those levels only). The neutral and
// the inserted passes stay as they are, in their places.
func (Target) Bind(table []passes.Pass, opt targets.Options) ([]passes.Pass, error) {
	mc, err := NewMachine(opt.Triple, opt.CPULevels...)
	if err != nil {
		return nil, err
	}
	own := map[[2]string]func(*ir.Module) (*ir.Module, error){}
	tables := [][]passes.Pass{mc.Table()}
	for _, l := range mc.Arch.Levels {
		t, err := mc.LevelTable(l.Name)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	for _, t := range tables {
		for _, p := range t {
			own[[2]string{p.Name, p.Desc}] = p.Run
		}
	}
	out := append([]passes.Pass(nil), table...)
	for i, p := range out {
		if run, ok := own[[2]string{p.Name, p.Desc}]; ok && !p.Inserted {
			out[i].Run = run
		}
	}
	return out, nil
}
