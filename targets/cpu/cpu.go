// Package cpu is the CPU target: it schedules the neutral module for a
// thread pool and vector units (work items on the pool, spread loops as
// vector loops, tile statements as loops), assembles an entry kernel per
// plan and prints LLVM 14 IR through codegen/llvm. It owns the CPU
// machine: the architectures (triple, data layout) and their CPU levels,
// the CPUID dispatch among the levels' clones, the runtime every .ll
// defines (thread pool, strerror, set/get_num_threads) and the stack a
// call needs; codegen/llvm knows none of them. docs/cpu.md describes its
// tiling and each schedule pass.
//
// cpu imports ir, lower (Tiling), passes, registry, targets, codegen/llvm
// and cpurt (its harness links the .ll); it must not import another target,
// driver or frontend.
package cpu

import (
	"fmt"
	"strings"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
)

func init() { targets.Register(Target{}) }

// Target is the CPU target.
type Target struct{}

// Name implements targets.Target.
func (Target) Name() string { return "cpu" }

// Files implements targets.Target.
func (Target) Files() string { return "<variant>.ll" }

// Tiling is 64-position KV tiles and prefill work items of about 128
// (head, query) rows (256 for GQA groups of 4 or more heads: PrefillRows),
// at most 16 heads of a GQA group (an MLA variant's decode items up to 64:
// MLADecodeHeads): a K/V tile staged (and packed for
// block-matmul) once feeds many rows, while a work item's arrays (heap
// scratch, about 256 KiB at head dim 128 and 128 rows) stay in L2. An
// item's rows are a multiple of 32 where that takes at most twice those
// rows (RowQuantum: the AMX tiles' blocks; at 128 rows a group of 7 heads
// got 224 rows, not 126 — 448 with PrefillRows' 256; at 1 thread
// on a Zen 4, 2048-token bf16 prefill of groups of 7 and 3 then took
// 2.3-3% less time at x86-64-v4 and x86-64-v4-bf16 too). Decode tiles are the
// TileRows of a K row as the cache stores it (64 positions up to 32 KiB
// of K: f32 at head dim 128, f16 or bf16 up to 256): each tile's softmax steps
// serve many rows, and the next tile's rows, prefetched as this one's are
// read, have a whole tile's work to come in. The staging walks a tile page run by page run
// (PageRuns): one page-table lookup per page, not per position. Decode
// tiles are not copied at all (DecodeDirect): the staging walk records
// each row's pool offset and the products read K and V there, widening
// in registers (f16 decode at x86-64-v3: 635 → 454 instructions per
// (position, kv head) row); only a tile with a hidden or outside page is
// copied, in f32 (DecodeStageStored off: staged as stored, the widening
// moved out of the copy into the products). Prefill over an f32 cache
// reads its tiles in place too (PrefillDirect): block-matmul packs K
// transposed from the pool rows and P·V reads V there, so the staging
// copy (a plain copy of f32 rows) is gone; over f16 or bf16 the copy
// widens each row once for many query rows' products and stays. Prefill's
// rescale factors alpha = exp(m_old - m_new) are a loop over the tile's
// rows of their own (PrefillAlphaLoop): one vector exp per vector of rows
// instead of a scalar one per row; and each row's max is taken in a loop
// before the exps (PrefillPhases, as DecodePhases for decode): the same
// arithmetic, bit for bit; 2048-token causal prefill on Zen 5 (1 thread,
// A B B A) took 2% less time in f32, 5% in bf16 at x86-64-v4-bf16 and 11%
// at x86-64-amx with its tile products stubbed out (what the level runs
// besides the tiles).
func (Target) Tiling(v *ir.Variant) lower.Tiling {
	rowBytes := v.HeadDimQK * max(1, v.KVDType.Type().Bits()/8)
	t := lower.Tiling{KVTile: 64, DecodeKVTile: TileRows(rowBytes), Rows: PrefillRows(v), MaxHeads: 16, PageRuns: true, DecodeDirect: true, PrefillDirect: true, RopeInPlace: true, DecodeRopeRelative: true, DecodeRopeInDot: true, PrefillAlphaLoop: true, PrefillPhases: true, DecodePhases: true, SplitBySequence: true, DecodeOneKernel: true, DecodeNextItem: true, DecodeWindowTiles: true, RowQuantum: amxBlock}
	if v.MLA != nil && lower.HeadTile(v.GroupSize(), MLADecodeHeads) >= BlockMinRows {
		t.DecodeMaxHeads, t.DecodeKVTile = MLADecodeHeads, MLADecodeTile
	}
	return t
}

// MLADecodeHeads and MLADecodeTile shape an MLA variant's decode items
// where that gives them at least BlockMinRows heads: up to 64 heads over
// 64-position tiles (narrower groups keep MaxHeads and TileRows, as
// measured before: the dot-product blocks). MLA's decode stages each K tile
// (its two segments, the latent and the RoPE part, into one f32 row) and
// shares every K/V row among all the group's heads, so it is bound by its
// multiply-adds, not its reads. Items of MaxHeads (16) heads over
// TileRows' 16-position tiles staged each tile once per 16 heads and ran
// the Q·Kᵀ of 16 rows in dot-product blocks; with 64 rows (at least
// BlockMinRows) the products are prefill's: block-matmul's micro-kernels,
// Q·Kᵀ on vdpbf16ps at x86-64-v4-bf16 over a bf16 cache. Measured on Zen
// 5 (`attnc bench examples/deepseek_v3_mla.attn`: 128 heads, bf16;
// docs/benchmarks.md, session 40), before → after: 8 × 4096 at 2 threads
// 25.3-25.5 → 15.3-15.9 ms (its multiply-adds at the FMA peak take 18.0),
// at 1 thread 48.0-49.9 → 29.3-31.4; one sequence of 16384 positions
// (split-KV) 12.8 → 8.1; 16 × 512 6.4 → 4.1; 1 × 64 0.054-0.068 → 0.038-
// 0.048; f16 25.8 → 21.3 and f32 28.1 → 23.8. 128 heads an item ran the
// same at 2 threads and 2-7% faster at 1, but left a sequence of one tile
// one item (1 × 64: 0.070 ms); 32 heads over 32-position tiles took 18.7
// ms, 128 heads over 16, 32 and 128 positions 19.2, 15.2 and 15.7.
const (
	MLADecodeHeads = 64
	MLADecodeTile  = 64
)

// PrefillRows is the (head, query) rows of a prefill work item: 256 for a
// GQA group of at least 4 heads at head dims up to 128, else 128. Each K/V
// tile an item stages (copied or widened from the pages, packed for the
// products: at x86-64-amx a 2-byte copy read from L3 took 11-12% of what
// the level runs besides its tiles) then serves twice the rows. Measured
// on Zen 4 (2048-token causal prefill, 1 thread, process CPU time, A B B
// A, outputs bit-identical; 256 rows over 128): a group of 4 (32/8 heads)
// 0.96-0.97 in bf16 at x86-64-v4-bf16, 0.97-0.98 in f16, 0.985-0.99 in
// f32, 0.87-0.90 at x86-64-amx besides its tiles (the same TDPBF16PS
// count; 512 rows: 0.97-0.98 more there, 1.01 at x86-64-v4-bf16); a group
// of 8 0.98-0.99 and of 7 (28/4: 448 rows, RowQuantum) 0.99 in bf16; but
// a group of 2 took 1.00-1.01 and MHA (256 query rows of one head) 1.02
// in bf16 and f32 — 1.05-1.07 in bf16 without a mask (1024 tokens), so
// not the causal diagonal; the cause was not found — and those keep 128.
// Wider heads keep 128 rows: an item's arrays (about 2 KiB a row at head
// dim 128, more at x86-64-amx) stay in L2.
func PrefillRows(v *ir.Variant) int {
	if v.KVHeads > 0 && v.GroupSize() >= 4 && max(v.HeadDimQK, v.HeadDimV) <= 128 {
		return 256
	}
	return 128
}

// Table is the CPU pass table of the default architecture (DefaultTriple).
// A build runs it bound to the machine of its triple (Bind).
var Table = defaultMachine.Table()

// LevelTable is defaultMachine's LevelTable: the named level's clone only.
func LevelTable(name string) ([]passes.Pass, error) { return defaultMachine.LevelTable(name) }

// Constraints are the CPU table's ordering rules.
var Constraints = append(append([]passes.Constraint(nil), passes.NeutralConstraints...),
	passes.Constraint{Before: "lower-tiles", After: "vectorize", Why: "the loops lower-tiles writes are spread loops that vectorize maps"},
	passes.Constraint{Before: "multiversion", After: "lower-tiles", Why: "the schedule passes fit each clone to its level's vector width and registers"},
	passes.Constraint{Before: "classify-tiles", After: "full-tiles", Why: "full-tiles narrows the tile_full branch classify-tiles writes"},
	passes.Constraint{Before: "classify-tiles", After: "multiversion", Why: "the target-neutral passes run once, before the kernels are cloned per level"},
	passes.Constraint{Before: "lower-tiles", After: "vector-exp", Why: "the exps of reduce statements are statements' only once lower-tiles wrote the reduce as a loop"},
	passes.Constraint{Before: "multiversion", After: "native-widen", Why: "native-widen chooses by each clone's CPU level"},
	passes.Constraint{Before: "native-widen", After: "legalize-dtype", Why: "legalize-dtype writes the exact integer widening of every storage-only load native-widen left"},
	passes.Constraint{Before: "prefetch-kv", After: "merge-twins", Why: "prefetch-kv pairs K's and V's row-offset arrays by name, one pool each: merged first, they would be one array read from two pools"},
	passes.Constraint{Before: "vectorize", After: "prefetch-kv", Why: "the staging loop's guard is its bound once vectorize folded it, so the row ahead is checked against it"},
	passes.Constraint{Before: "multiversion", After: "block-matmul", Why: "block-matmul fits each clone's micro-kernels to its level's vector width and registers"},
	passes.Constraint{Before: "block-matmul", After: "lower-tiles", Why: "lower-tiles writes the matmuls block-matmul left (decode tiles, odd shapes) as loops"},
	passes.Constraint{Before: "block-matmul", After: "heap-scratch", Why: "the packed transposed K tile block-matmul declares is large: heap-scratch must see it"},
	passes.Constraint{Before: "multiversion", After: "finite-codes", Why: "finite-codes chooses by each clone's CPU level"},
	passes.Constraint{Before: "finite-codes", After: "block-matmul", Why: "finite-codes finds the products that read codes in place by their matmuls, which block-matmul replaces"},
	passes.Constraint{Before: "finite-codes", After: "native-widen", Why: "native-widen drops the NaN path of the codes the finite-codes check covers"},
	passes.Constraint{Before: "multiversion", After: "vector-reduce", Why: "vector-reduce uses each clone's vector width"},
	passes.Constraint{Before: "multiversion", After: "exp-bound", Why: "exp-bound rewrites the level clones"},
	passes.Constraint{Before: "exp-bound", After: "vector-reduce", Why: "exp-bound finds a row's max by its reduce statement, which vector-reduce replaces"},
	passes.Constraint{Before: "exp-bound", After: "vector-exp", Why: "vector-exp computes the bounded exp(min(x, 0)) without the overflow half of its polynomial"},
	passes.Constraint{Before: "vector-reduce", After: "block-matmul", Why: "vector-reduce finds the KV tiles by their matmuls, which block-matmul replaces"},
	passes.Constraint{Before: "vector-reduce", After: "lower-tiles", Why: "lower-tiles writes the reduces vector-reduce left as loops"},
	passes.Constraint{Before: "late-simplify", After: "vector-loops", Why: "vector-loops needs constant trip counts, which late-simplify folds from the full tiles' extents"},
	passes.Constraint{Before: "vector-exp", After: "vector-loops", Why: "an exp is written lane by lane only as vector-exp's polynomial"},
	passes.Constraint{Before: "multiversion", After: "vector-loops", Why: "vector-loops uses each clone's vector width"},
	passes.Constraint{Before: "lower-tiles", After: "heap-scratch", Why: "heap-scratch moves the work items' arrays as the schedule leaves them; one a schedule pass added later would stay on the stack"},
)

// Passes implements targets.Target.
func (Target) Passes() []passes.Pass { return Table }

// Constraints implements targets.Target.
func (Target) Constraints() []passes.Constraint { return Constraints }

// Assemble implements targets.Target: one entry kernel per plan.
func (Target) Assemble(m *ir.Module) (*ir.Module, error) { return Assemble(m) }

// Section implements targets.Target: the triple the IR is for and the
// levels the build clones for (every level of the triple, or those
// opt.CPULevels names, "host" resolved), baseline first.
func (Target) Section(opt targets.Options) (registry.TargetManifest, error) {
	mc, err := NewMachine(opt.Triple, opt.CPULevels...)
	if err != nil {
		return registry.TargetManifest{}, err
	}
	return registry.TargetManifest{Triple: mc.Arch.Triple, Levels: mc.Built()}, nil
}

// Emit implements targets.Target: LLVM IR for opt.Triple.
func (Target) Emit(v *ir.Variant, m *ir.Module, opt targets.Options) ([]targets.Artifact, error) {
	mc, err := NewMachine(opt.Triple, opt.CPULevels...)
	if err != nil {
		return nil, err
	}
	ll, err := mc.Emit(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: llvm: %w", v.Pos, v.Name, err)
	}
	return []targets.Artifact{{Name: v.Name + ".ll", Data: []byte(ll)}}, nil
}

// Runtime implements targets.Target: the status messages and the worker
// threads' controls, which the runtime (runtime.go) defines in every .ll.
func (Target) Runtime(m *ir.Module) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n/* Message for a status code. */\nconst char *%s_strerror(int32_t code);\n", m.Prefix)
	fmt.Fprintf(&sb, "/* Worker threads for later calls: n <= 0 restores the default (all online CPUs,\n   at most %d); larger n is clamped to min(%d, max(%d, %d x online CPUs)). */\nvoid %s_set_num_threads(int32_t n);\nint32_t %s_get_num_threads(void);\n",
		MaxThreads, MaxThreads, MinThreadLimit, ThreadsPerCPU, m.Prefix, m.Prefix)
	return sb.String()
}

// Header implements targets.Target: the stack a call needs and every
// entry kernel's prototype.
func (Target) Header(v *ir.Variant, m *ir.Module) string {
	var sb strings.Builder
	var most int64
	for _, p := range m.Plans {
		most = max(most, StackBytes(m, p.Entry))
	}
	fmt.Fprintf(&sb, "\n/* The most stack one call of any entry point needs on the calling thread\n   (large scratch is on the heap; worker threads get the default stack). */\n#define %s_STACK_BYTES %d\n", strings.ToUpper(m.Prefix), most)
	// A library without baseline clones (attnc build --cpu-levels above
	// it) says so; every other header is as it always was.
	above := ""
	if !baselineCloned(m) {
		above = fmt.Sprintf("\n   Built for levels above the baseline (attnc build --cpu-levels), it is NULL\n   too on a CPU below every level built, and calls return %s_CPU_LEVEL.", strings.ToUpper(m.Prefix))
	}
	fmt.Fprintf(&sb, "\n/* The CPU level the kernels run at (the manifest's targets.cpu.levels): the best\n   this CPU supports, chosen at the first call, or the one $%s names;\n   NULL when that variable names no level or one the CPU lacks (calls return\n   %s_CPU_LEVEL).%s */\nconst char *%s_cpu_level(void);\n",
		LevelEnv, strings.ToUpper(m.Prefix), above, m.Prefix)
	for _, p := range m.Plans {
		entry := "entry point"
		if !p.Public {
			entry = "internal entry, called by another role's entry"
		}
		fmt.Fprintf(&sb, "\n/* %s (%s; needs %d bytes of stack). */\nint32_t %s(%s);\n", p.Role, entry, StackBytes(m, p.Entry), p.Entry, targets.CParams(p.Params, ""))
	}
	return sb.String()
}

// baselineCloned reports whether m's work kernels have clones at their
// architecture's baseline level (x86-64, neon), as every build not
// restricted to higher levels gives them; a module without clones counts
// as having them.
func baselineCloned(m *ir.Module) bool {
	cloned := false
	for _, k := range m.Kernels {
		if k.Level == "" {
			continue
		}
		cloned = true
		for _, a := range Arches {
			if k.Level == a.Levels[0].Name {
				return true
			}
		}
	}
	return !cloned
}

// Manifest implements targets.Target: the entries with their plans, then
// the work kernels they run.
func (Target) Manifest(v *ir.Variant, m *ir.Module, opt targets.Options) []registry.KernelManifest {
	var out []registry.KernelManifest
	for _, p := range m.Plans {
		out = append(out, registry.KernelManifest{Variant: v.Name, Role: string(p.Role), Symbol: p.Entry, Entry: p.Public,
			Target: "cpu", File: v.Name + ".ll", Args: registry.ArgsOf(p.Params), Returns: "i32 status",
			Constraints: registry.Constraints(v), StackBytes: StackBytes(m, p.Entry),
			Plan: registry.PlanOf(p, registry.PlanOptions{Threads: "the worker threads (set_num_threads)", Lengths: true})})
	}
	for _, k := range m.Kernels {
		if m.Plan(k.Role) != nil && m.Plan(k.Role).Entry == k.Name {
			continue
		}
		out = append(out, registry.KernelManifest{Variant: v.Name, Role: string(k.Role), Symbol: k.Name,
			Target: "cpu", File: v.Name + ".ll", Args: registry.ArgsOf(k.Params), Returns: "i32 status",
			Constraints: registry.Constraints(v), StackBytes: StackBytes(m, k.Name), Level: k.Level})
	}
	return out
}

// Select implements targets.Target: the plan evaluated with the call's
// thread count and lengths.
func (Target) Select(v *ir.Variant, m *ir.Module, s registry.Shape) (registry.Selection, error) {
	return registry.Select(v, m, s, registry.Host{Target: "cpu", Threads: max(s.Threads, 1), Lengths: true})
}
