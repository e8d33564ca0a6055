package cuda

import (
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets/gpu"
)

// BlockThreads is the block size of every work kernel: 4 warps.
const BlockThreads = 128

// Layer is the GPU schedule layer on NVIDIA GPUs: warps of 32 lanes,
// blocks of BlockThreads, the m16n8k16 tensor-core instruction on f16 and
// bf16, and the K/V ring doubled only while the block keeps its resident
// blocks (RingSlots).
var Layer = &gpu.Layer{
	Lanes:        32,
	BlockThreads: BlockThreads,
	Matrix:       []gpu.MatrixShape{{M: mmaM, N: mmaN, K: mmaK, In: []ir.Type{ir.F16, ir.BF16}}},
	RingSlots:    RingSlots,
}

// RingSlots is the number of ring slots a work item gets whose shared
// arrays take smem bytes with one slot, ringBytes of them the staged K/V
// tiles: gpu.RingStages when the block, its tiles doubled, still holds
// AttentionMinBlocks blocks per SM on every bound architecture (sm_80,
// sm_90) with BlockThreads threads and the register budget
// __launch_bounds__ then gives it (MaxRegisters); else 1 (cp.async still,
// waiting for every copy before the tile's compute, no overlap across
// tiles). Two resident blocks per SM (split-KV at small batch) are worth
// more than the overlap of one block's loads with its own compute; the
// figures are the manifest's occupancy model, so the choice needs no
// ptxas and is deterministic.
func RingSlots(smem, ringBytes int) int {
	doubled := smem + ringBytes*(gpu.RingStages-1)
	regs := MaxRegisters(BlockThreads, AttentionMinBlocks)
	for _, name := range boundArchs {
		o, err := sass.Archs[name].Occupancy(regs, 0, BlockThreads, doubled)
		if err != nil || o.BlocksPerSM < AttentionMinBlocks {
			return 1
		}
	}
	return gpu.RingStages
}
