package sass

import (
	"fmt"
	"sort"
	"strings"
)

// Arch holds the per-SM limits that decide occupancy on one architecture.
//
// Sources: the CUDA C++ Programming Guide, "Compute Capabilities",
// table "Technical Specifications per Compute Capability" (8.0 and 9.0:
// 32 resident blocks, 64 warps = 2048 threads and 64K 32-bit registers per
// SM; 255 registers per thread; 1024 threads per block; shared memory per
// SM up to 164 KB (8.0) / 228 KB (9.0), per block up to 163 KB / 227 KB
// with the opt-in attribute) and its sections "Compute Capability 8.x" /
// "9.0" (1 KB of shared memory per block is reserved for the system:
// cudaDevAttrReservedSharedMemoryPerBlock); the allocation granularities
// (registers in units of 256 per warp, in 4 SM sub-partitions; shared
// memory in units of 128 bytes) and the computation itself
// (cudaOccMaxActiveBlocksPerMultiprocessor) follow CUDA's
// cuda_occupancy.h.
type Arch struct {
	Name               string
	MaxThreadsPerSM    int // resident threads (MaxThreadsPerSM/32 warps)
	MaxBlocksPerSM     int
	MaxThreadsPerBlock int
	RegsPerSM          int // 32-bit registers
	RegsPerBlock       int
	MaxRegsPerThread   int
	RegUnit            int // registers are allocated per warp in units of this many
	SubPartitions      int // the register file is split evenly among them
	SmemPerSM          int // bytes, with the largest carveout (the default preference)
	SmemPerBlockOptin  int // bytes a block may use (static + dynamic) after cudaFuncSetAttribute
	SmemReserved       int // bytes the driver reserves per block
	SmemUnit           int // shared memory allocation granularity, bytes
}

// Archs are the architectures attnc targets.
var Archs = map[string]Arch{
	"sm_80": {Name: "sm_80", MaxThreadsPerSM: 2048, MaxBlocksPerSM: 32, MaxThreadsPerBlock: 1024,
		RegsPerSM: 65536, RegsPerBlock: 65536, MaxRegsPerThread: 255, RegUnit: 256, SubPartitions: 4,
		SmemPerSM: 164 << 10, SmemPerBlockOptin: 163 << 10, SmemReserved: 1 << 10, SmemUnit: 128},
	"sm_90": {Name: "sm_90", MaxThreadsPerSM: 2048, MaxBlocksPerSM: 32, MaxThreadsPerBlock: 1024,
		RegsPerSM: 65536, RegsPerBlock: 65536, MaxRegsPerThread: 255, RegUnit: 256, SubPartitions: 4,
		SmemPerSM: 228 << 10, SmemPerBlockOptin: 227 << 10, SmemReserved: 1 << 10, SmemUnit: 128},
}

// ArchNames returns the names of Archs, sorted.
func ArchNames() []string {
	var ns []string
	for n := range Archs {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// Occupancy is how many blocks of one launch fit on an SM at once.
type Occupancy struct {
	BlocksPerSM int
	WarpsPerSM  int
	Fraction    float64 // WarpsPerSM / the architecture's resident-warp limit
	// Limiters name what bounds BlocksPerSM ("warps", "registers",
	// "shared memory", "blocks"), every one that reaches the minimum.
	Limiters []string
	// SmemPerBlock is the shared memory a block is allocated: static +
	// dynamic + the reservation, rounded up to the allocation unit.
	SmemPerBlock int
}

// String is "4 blocks, 16/64 warps (25%), registers".
func (o Occupancy) String() string {
	return fmt.Sprintf("%d blocks, %d warps (%.0f%%), %s", o.BlocksPerSM, o.WarpsPerSM, 100*o.Fraction,
		strings.Join(o.Limiters, "+"))
}

// Occupancy computes the blocks per SM of a launch of block threads with
// dynSmem bytes of dynamic shared memory, for a kernel using regs registers
// per thread and staticSmem bytes of static shared memory, with the
// default shared-memory carveout preference and the opt-in per-block limit
// (the launchers raise it with attnc_set_smem when they need more than 48
// KB). An impossible launch (too many threads, registers or bytes for one
// block) is an error.
func (a Arch) Occupancy(regs, staticSmem, block, dynSmem int) (Occupancy, error) {
	if block <= 0 || block > a.MaxThreadsPerBlock {
		return Occupancy{}, fmt.Errorf("sass: %s: a block of %d threads (1..%d)", a.Name, block, a.MaxThreadsPerBlock)
	}
	if regs < 0 || regs > a.MaxRegsPerThread {
		return Occupancy{}, fmt.Errorf("sass: %s: %d registers per thread (at most %d)", a.Name, regs, a.MaxRegsPerThread)
	}
	if staticSmem < 0 || dynSmem < 0 {
		return Occupancy{}, fmt.Errorf("sass: %s: negative shared memory", a.Name)
	}
	maxWarps := a.MaxThreadsPerSM / 32
	warps := (block + 31) / 32

	// Warps.
	limWarps := maxWarps / warps

	// Registers: allocated per warp in RegUnit units; the hardware checks a
	// block as if its warps were spread over every sub-partition.
	limRegs := int(^uint(0) >> 1)
	if regs > 0 {
		perWarp := roundUp(regs*32, a.RegUnit)
		if perWarp*roundUp(warps, a.SubPartitions) > a.RegsPerBlock {
			return Occupancy{}, fmt.Errorf("sass: %s: %d registers x %d threads exceed the %d registers of a block",
				a.Name, regs, block, a.RegsPerBlock)
		}
		warpsPerSub := a.RegsPerSM / a.SubPartitions / perWarp
		limRegs = warpsPerSub * a.SubPartitions / warps
	}

	// Shared memory: static + dynamic + the reservation, in SmemUnit units.
	if staticSmem+dynSmem > a.SmemPerBlockOptin {
		return Occupancy{}, fmt.Errorf("sass: %s: %d bytes of shared memory per block (static %d + dynamic %d) exceed %d",
			a.Name, staticSmem+dynSmem, staticSmem, dynSmem, a.SmemPerBlockOptin)
	}
	smem := roundUp(staticSmem+dynSmem+a.SmemReserved, a.SmemUnit)
	limSmem := a.SmemPerSM / smem

	limBlocks := a.MaxBlocksPerSM

	n := min(limWarps, limRegs, limSmem, limBlocks)
	o := Occupancy{BlocksPerSM: n, WarpsPerSM: n * warps, SmemPerBlock: smem}
	o.Fraction = float64(o.WarpsPerSM) / float64(maxWarps)
	for _, l := range []struct {
		name string
		lim  int
	}{{"warps", limWarps}, {"registers", limRegs}, {"shared memory", limSmem}, {"blocks", limBlocks}} {
		if l.lim == n {
			o.Limiters = append(o.Limiters, l.name)
		}
	}
	return o, nil
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }
