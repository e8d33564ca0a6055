// Package cuda is the CUDA target: the GPU layer (targets/gpu) at 32
// lanes maps the neutral module onto NVIDIA GPUs — a block of threads per
// work item, warps for reductions, shared memory between phases with
// barriers, 16-byte staging copies, the cp.async K/V ring — and the
// target's own passes add what is NVIDIA's: m16n8k16 tensor cores with
// ldmatrix fragments for tile matmuls that fit, the swizzled layout they
// read, the occupancy rule of the ring. codegen/cuda prints the kernels
// and, from the plans, the host launchers.
//
// cuda imports ir, lower (Tiling), passes, registry, targets, targets/gpu,
// targets/gpu/host, codegen/cstyle, codegen/cuda and codegen/cuda/sass
// (attnc sass); it must not import another target,
// driver or frontend.
package cuda

import (
	"fmt"

	cudagen "github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/gpu"
	"github.com/attnc/attnc/targets/gpu/host"
)

func init() { targets.Register(Target{}) }

// Target is the CUDA target.
type Target struct{}

// Name implements targets.Target.
func (Target) Name() string { return "cuda" }

// Files implements targets.Target.
func (Target) Files() string { return "<variant>.cu" }

// Tiling is 32-position KV tiles and work items of 16 (head, query) rows,
// padded: one m16n8k16 tile of rows, and the K/V tiles of every example
// fit in shared memory.
func (Target) Tiling(v *ir.Variant) lower.Tiling {
	return lower.Tiling{KVTile: 32, Rows: mmaM, PadRows: true, MaxHeads: mmaM}
}

// Table is the CUDA pass table.
var Table = []passes.Pass{
	passes.InlineDefsPass,
	passes.SimplifyPass,
	passes.ClassifyTilesPass,
	passes.ExpandCallsPass,
	{Name: "narrow-operands", Run: NarrowOperands,
		Desc: "the operand arrays of matmuls tensor cores can take (m16n8k16 shapes; f16/bf16 values, or 8-bit codes under f16/bf16 queries) narrowed to that type"},
	{Name: "use-mma", Run: UseMMA,
		Desc: "matmuls on narrowed f16/bf16 operands as m16n8k16 tensor-core fragments per warp (P split hi + lo)"},
	{Name: "acc-registers", Run: Layer.AccRegisters(mmaFragment),
		Desc: "the P·V accumulator of the tensor-core fragments in registers across the KV tile loop (up to 64 per thread)"},
	{Name: "simt-matmul", Required: true, Run: gpu.SIMTMatMul,
		Desc: "the remaining matmuls as a dot product per output element"},
	{Name: "stage-codes", Run: gpu.StageCodes,
		Desc: "arrays of 8-bit KV codes staged as the codes (a byte each), converted to f32 where read"},
	{Name: "widen-copies", Run: gpu.WidenCopies,
		Desc: "row copies of 16-bit or 32-bit elements as 16-byte copies"},
	{Name: "swizzle-shared", Run: SwizzleShared,
		Desc: "arrays ldmatrix reads laid out with 16-byte chunks XOR-swizzled by row, so ldmatrix and cp.async hit no bank conflicts"},
	{Name: "pipeline-kv", Run: Layer.PipelineKV,
		Desc: "K/V tiles staged with cp.async into a two-stage shared-memory ring (tile kt+1 in flight while tile kt computes) when the block still gets 2 blocks per SM on sm_80 and sm_90, else into one slot"},
	{Name: "map-warps", Required: true, Run: Layer.MapWarps,
		Desc: "spreads that reduce: one iteration per warp, reductions over lanes with butterfly shuffles"},
	{Name: "stage-shared", Required: true, Run: gpu.StageShared,
		Desc: "a work item's arrays in shared memory, barriers between phases that share memory"},
	{Name: "map-threads", Required: true, Run: Layer.MapThreads,
		Desc: "work items on blocks of 128 threads: spreads flattened and strided over threads, warps for lanes"},
	passes.LegalizeDTypePass,
	passes.LateSimplifyPass,
}

// Constraints are the CUDA table's ordering rules.
var Constraints = append(append([]passes.Constraint(nil), passes.NeutralConstraints...),
	passes.Constraint{Before: "narrow-operands", After: "use-mma", Why: "use-mma takes the matmuls whose operands narrow-operands narrowed"},
	passes.Constraint{Before: "use-mma", After: "acc-registers", Why: "acc-registers moves the accumulator of the fragment loops use-mma writes"},
	passes.Constraint{Before: "acc-registers", After: "stage-shared", Why: "stage-shared places barriers around the accumulator's accesses in shared memory, which acc-registers moves to registers"},
	passes.Constraint{Before: "acc-registers", After: "map-threads", Why: "map-threads gives each thread its elements of the register array acc-registers declares"},
	passes.Constraint{Before: "use-mma", After: "simt-matmul", Why: "simt-matmul takes the matmuls tensor cores could not"},
	passes.Constraint{Before: "narrow-operands", After: "widen-copies", Why: "only the staging stores narrow-operands narrowed to f16/bf16 are raw 16-bit row copies"},
	passes.Constraint{Before: "use-mma", After: "map-warps", Why: "use-mma's zeroing step reduces over A's rows"},
	passes.Constraint{Before: "narrow-operands", After: "legalize-dtype", Why: "narrow-operands narrows operand arrays to f16/bf16, whose accesses legalize-dtype turns into carrier bits"},
	passes.Constraint{Before: "use-mma", After: "swizzle-shared", Why: "swizzle-shared lays out the arrays use-mma reads with ldmatrix"},
	passes.Constraint{Before: "widen-copies", After: "swizzle-shared", Why: "a swizzled index is no longer a unit-stride row copy"},
	passes.Constraint{Before: "swizzle-shared", After: "pipeline-kv", Why: "swizzle-shared reads the row width from ldmatrix addresses before ring offsets are added to them"},
	gpu.Constraint("widen-copies", "pipeline-kv"),
	passes.Constraint{Before: "use-mma", After: "pipeline-kv", Why: "the zeroing of V rows use-mma adds must use the ring slot of its tile"},
	gpu.Constraint("pipeline-kv", "stage-shared"),
	gpu.Constraint("simt-matmul", "map-threads"),
	passes.Constraint{Before: "narrow-operands", After: "stage-codes", Why: "narrow-operands takes the code arrays tensor cores read (use-mma converts them itself)"},
	gpu.Constraint("simt-matmul", "stage-codes"),
	gpu.Constraint("stage-codes", "widen-copies"),
	gpu.Constraint("stage-codes", "legalize-dtype"),
	gpu.Constraint("widen-copies", "map-threads"),
	gpu.Constraint("map-warps", "map-threads"),
	gpu.Constraint("stage-shared", "map-threads"),
)

// Passes implements targets.Target.
func (Target) Passes() []passes.Pass { return Table }

// Constraints implements targets.Target.
func (Target) Constraints() []passes.Constraint { return Constraints }

// Assemble implements targets.Target: host launchers are printed from the
// plans, so the module keeps only the kernels a public plan launches
// (host.Assemble).
func (Target) Assemble(m *ir.Module) (*ir.Module, error) { return host.Assemble(m) }

// Launcher is the host launcher symbol of a plan's entry.
func Launcher(p *ir.Plan) string { return host.Launcher(p) }

// GridStrideBlocks is the grid of a launch whose item count depends on
// device memory: the kernel strides its items over this many blocks per
// multiprocessor.
const GridStrideBlocks = 4

// DefaultSMs is the multiprocessor count Select assumes when the shape
// gives none (an H100 SXM / H200).
const DefaultSMs = 132

// Host is the CUDA target's host side: launchers with 2 x SMs workers,
// grid-stride launches of GridStrideBlocks per SM, the launch bounds of
// bounds.go.
var Host = &host.Target{
	Name: "cuda", Language: "CUDA", Ext: ".cu", Stream: "cudaStream_t",
	Units: "SMs", DefaultUnits: DefaultSMs, ThreadsPerUnit: 2, GridStrideBlocks: GridStrideBlocks,
	BlockThreads: BlockThreads, Bounds: boundsOf,
}

// Section implements targets.Target.
func (Target) Section(opt targets.Options) (registry.TargetManifest, error) {
	return registry.TargetManifest{}, nil
}

// Emit implements targets.Target.
func (Target) Emit(v *ir.Variant, m *ir.Module, opt targets.Options) ([]targets.Artifact, error) {
	cu, err := cudagen.Emit(m, Host.Printer(MinBlocksPerSM))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", v.Pos, v.Name, err)
	}
	return []targets.Artifact{{Name: v.Name + ".cu", Data: []byte(cu)}}, nil
}

// Runtime implements targets.Target: the .cu defines nothing besides the
// launchers (a status code's message is in the header's comments).
func (Target) Runtime(m *ir.Module) string { return "" }

// Header implements targets.Target: the public launchers.
func (Target) Header(v *ir.Variant, m *ir.Module) string { return Host.Header(v, m) }

// Manifest implements targets.Target: the launchers with their plans, then
// the device kernels with their launch settings.
func (Target) Manifest(v *ir.Variant, m *ir.Module, opt targets.Options) []registry.KernelManifest {
	return Host.Manifest(v, m)
}

// Select implements targets.Target: what the launcher does for a call of
// that shape — the plan evaluated as the host evaluates it (2 x SMs
// workers, no sequence lengths), with each launch's grid, block and shared
// memory.
func (Target) Select(v *ir.Variant, m *ir.Module, s registry.Shape) (registry.Selection, error) {
	return Host.Select(v, m, s)
}
