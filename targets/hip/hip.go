// Package hip is the HIP target for AMD CDNA3 GPUs (gfx942, MI300): the GPU
// layer (targets/gpu) at 64 lanes — AMD's wavefront — maps the neutral
// module onto workgroups of four wavefronts, reductions over a wavefront's
// 64 lanes with butterfly shuffles, the item's arrays in LDS with barriers
// between phases and 16-byte staging copies; tile matmuls on f16/bf16
// operands run on the MFMA matrix cores (use-mfma), the others as SIMT dot
// products. codegen/hip prints the kernels in HIP C++ (the C-style core
// with HIP's dialect) and, from the plans, host launchers for the HIP
// runtime; targets/gpu/host is the host side it shares with CUDA.
//
// hip imports ir, lower (Tiling), passes, registry, targets, targets/gpu,
// targets/gpu/host, codegen/cstyle, codegen/hip and codegen/hip/isa; it
// must not import another target, driver or frontend.
package hip

import (
	"fmt"

	hipgen "github.com/attnc/attnc/codegen/hip"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/gpu"
	"github.com/attnc/attnc/targets/gpu/host"
)

func init() { targets.Register(Target{}) }

// Target is the HIP target.
type Target struct{}

// Name implements targets.Target.
func (Target) Name() string { return "hip" }

// Files implements targets.Target.
func (Target) Files() string { return "<variant>.hip" }

// Lanes is the wavefront width of CDNA3.
const Lanes = 64

// BlockThreads is the block size of every work kernel: 4 wavefronts, one
// per SIMD of a CU.
const BlockThreads = 256

// Layer is the GPU schedule layer on CDNA3: 64-lane wavefronts, blocks of
// BlockThreads, and a K/V ring of one slot — CDNA3 has no asynchronous
// global-to-LDS copy a thread can wait for (the prelude's "async" copies
// complete at once), so a second slot would only cost LDS.
var Layer = &gpu.Layer{
	Lanes:        Lanes,
	BlockThreads: BlockThreads,
	Matrix:       []gpu.MatrixShape{{M: mfmaM, N: mfmaN, K: mfmaK, In: []ir.Type{ir.F16, ir.BF16}}},
	RingSlots:    func(smem, ringBytes int) int { return 1 },
}

// Tiling implements targets.Target: the first of Tilings whose scheduled
// kernels fit the LDS (FitTiling).
func (Target) Tiling(v *ir.Variant) lower.Tiling { return FitTiling(v) }

// Table is the HIP pass table: the neutral passes and the GPU layer.
var Table = []passes.Pass{
	passes.InlineDefsPass,
	passes.SimplifyPass,
	passes.ClassifyTilesPass,
	passes.ExpandCallsPass,
	{Name: "use-mfma", Run: UseMFMA,
		Desc: "matmuls on f16/bf16 operands as MFMA 16x16x16 fragments per wavefront (P split into half-precision parts), when the shapes fit"},
	{Name: "acc-registers", Run: Layer.AccRegisters(mfmaFragment),
		Desc: "the P·V accumulator of the MFMA fragment loops in registers across the KV tile loop (up to 64 per work-item)"},
	{Name: "simt-matmul", Required: true, Run: gpu.SIMTMatMul,
		Desc: "the remaining matmuls as a dot product per output element"},
	{Name: "stage-stored", Run: gpu.StageStored,
		Desc: "arrays that hold cache elements (f16, bf16, 8-bit codes) staged in LDS as stored, converted to f32 where read"},
	{Name: "widen-copies", Run: gpu.WidenCopies,
		Desc: "row copies of 16-bit or 32-bit elements as 16-byte copies"},
	{Name: "pipeline-kv", Run: Layer.PipelineKV,
		Desc: "K/V tiles staged into one LDS slot with the 16-byte copies, waited for before the tile's compute (CDNA3's copies complete at once)"},
	{Name: "map-warps", Required: true, Run: Layer.MapWarps,
		Desc: "spreads that reduce: one iteration per wavefront, reductions over its 64 lanes with butterfly shuffles"},
	{Name: "stage-shared", Required: true, Run: gpu.StageShared,
		Desc: "a work item's arrays in LDS, barriers between phases that share it"},
	{Name: "map-threads", Required: true, Run: Layer.MapThreads,
		Desc: "work items on workgroups of 256 work-items: spreads flattened and strided over them, wavefronts for lanes"},
	passes.LegalizeDTypePass,
	passes.LateSimplifyPass,
}

// Constraints are the HIP table's ordering rules: the neutral ones, the
// layer's, stage-stored's (the place of the layer's stage-codes) and
// use-mfma's.
var Constraints = append(append([]passes.Constraint(nil), passes.NeutralConstraints...),
	passes.Constraint{Before: "use-mfma", After: "simt-matmul", Why: "simt-matmul takes the matmuls the matrix cores could not"},
	passes.Constraint{Before: "use-mfma", After: "acc-registers", Why: "acc-registers moves the accumulator of the fragment loops use-mfma writes"},
	passes.Constraint{Before: "acc-registers", After: "stage-shared", Why: "stage-shared places barriers around the accumulator's accesses in LDS, which acc-registers moves to registers"},
	passes.Constraint{Before: "acc-registers", After: "map-threads", Why: "map-threads gives each work-item its elements of the register array acc-registers declares"},
	passes.Constraint{Before: "use-mfma", After: "stage-stored", Why: "use-mfma narrows the operand arrays it reads itself, codes included"},
	passes.Constraint{Before: "use-mfma", After: "widen-copies", Why: "only the staging stores use-mfma narrowed to f16/bf16 are raw 16-bit row copies"},
	passes.Constraint{Before: "use-mfma", After: "pipeline-kv", Why: "the zeroing of B rows use-mfma adds must use the ring slot of its tile"},
	passes.Constraint{Before: "use-mfma", After: "map-warps", Why: "use-mfma's zeroing step reduces over A's rows"},
	passes.Constraint{Before: "use-mfma", After: "legalize-dtype", Why: "use-mfma narrows operand arrays to f16/bf16, whose accesses legalize-dtype turns into carrier bits"},
	gpu.Constraint("widen-copies", "pipeline-kv"),
	gpu.Constraint("pipeline-kv", "stage-shared"),
	gpu.Constraint("simt-matmul", "map-threads"),
	gpu.Constraint("widen-copies", "map-threads"),
	gpu.Constraint("map-warps", "map-threads"),
	gpu.Constraint("stage-shared", "map-threads"),
	passes.Constraint{Before: "simt-matmul", After: "stage-stored", Why: "stage-stored rewrites the explicit loads simt-matmul writes for the matmuls' operands"},
	passes.Constraint{Before: "stage-stored", After: "widen-copies", Why: "the staging stores stage-stored leaves are row copies of the stored elements that widen-copies groups"},
	passes.Constraint{Before: "stage-stored", After: "legalize-dtype", Why: "the narrowed arrays' loads and stores become carrier bits and the table's conversions in legalize-dtype"},
)

// Passes implements targets.Target.
func (Target) Passes() []passes.Pass { return Table }

// Constraints implements targets.Target.
func (Target) Constraints() []passes.Constraint { return Constraints }

// Assemble implements targets.Target: the kernels the public plans
// launch (host.Assemble).
func (Target) Assemble(m *ir.Module) (*ir.Module, error) { return host.Assemble(m) }

// DefaultCUs is the compute-unit count Select assumes when the shape gives
// none (an MI300X).
const DefaultCUs = 304

// GridStrideBlocks is the grid per CU of a launch whose item count depends
// on device memory.
const GridStrideBlocks = 4

// Host is the HIP target's host side.
var Host = &host.Target{
	Name: "hip", Language: "HIP", Ext: ".hip", Stream: "hipStream_t",
	Units: "CUs", DefaultUnits: DefaultCUs, ThreadsPerUnit: 2, GridStrideBlocks: GridStrideBlocks,
	BlockThreads: BlockThreads, Bounds: boundsOf,
}

// Launcher is the host launcher symbol of a plan's entry.
func Launcher(p *ir.Plan) string { return host.Launcher(p) }

// Section implements targets.Target.
func (Target) Section(opt targets.Options) (registry.TargetManifest, error) {
	return registry.TargetManifest{}, nil
}

// Emit implements targets.Target.
func (Target) Emit(v *ir.Variant, m *ir.Module, opt targets.Options) ([]targets.Artifact, error) {
	h := Host.Printer(MinWavesPerSIMD)
	h.ArgsAtUse = ArgsAtUse
	src, err := hipgen.Emit(m, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", v.Pos, v.Name, err)
	}
	return []targets.Artifact{{Name: v.Name + ".hip", Data: []byte(src)}}, nil
}

// Runtime implements targets.Target: the .hip defines nothing besides the
// launchers.
func (Target) Runtime(m *ir.Module) string { return "" }

// Header implements targets.Target: the public launchers.
func (Target) Header(v *ir.Variant, m *ir.Module) string { return Host.Header(v, m) }

// Manifest implements targets.Target: the launchers with their plans, then
// the device kernels with their launch settings and bounds.
func (Target) Manifest(v *ir.Variant, m *ir.Module, opt targets.Options) []registry.KernelManifest {
	return Host.Manifest(v, m)
}

// Select implements targets.Target: what the launcher does for a call of
// that shape (2 x CUs workers, no sequence lengths).
func (Target) Select(v *ir.Variant, m *ir.Module, s registry.Shape) (registry.Selection, error) {
	return Host.Select(v, m, s)
}
