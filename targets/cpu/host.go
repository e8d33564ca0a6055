package cpu

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
)

// goArch is the GOARCH of each architecture's machines (the triple's
// first field), for HostLevel: only a build on such a machine knows its
// level.
var goArch = map[string]string{"x86_64": "amd64", "aarch64": "arm64"}

// hostLevel is the index in a.Levels of the level the entries of a
// library with every level pick on the machine that runs this, with
// $ATTNC_CPU_LEVEL unset: the same decision as the generated detection
// (defineDetectLevel, then rt.cpu_level's request for an AMX level's tile
// state and its vendor check for a level with a Vendor), made with CPUID,
// XGETBV and arch_prctl in Go. It is an error on
// a machine of another architecture than the triple's.
func (a Arch) hostLevel() (int, error) {
	arch, _, _ := strings.Cut(a.Triple, "-")
	if goArch[arch] != runtime.GOARCH {
		return -1, fmt.Errorf("CPU level %q: this machine (%s) is not a %s machine: name the levels of %s (known: %s)",
			HostLevel, runtime.GOARCH, arch, a.Triple, strings.Join(a.LevelNames(), ", "))
	}
	return detectHost(a.Levels, hostCPUID), nil
}

// cpuidFunc reads CPUID leaf and subleaf into eax, ebx, ecx, edx, and
// XCR0's low half; nil on a machine without CPUID. amxPermit asks the OS
// for the AMX tile state (amx_permit) and says whether it was granted;
// nil refuses.
type cpuidFunc struct {
	cpuid     func(leaf, sub uint32) [4]uint32
	xgetbv    func() uint32
	amxPermit func() bool
}

// detectHost is the best level of levels that the machine cpu describes
// runs: the highest level whose CPUID bits are set and whose XCR0 state
// bits are enabled (XCR0 read only when CPUID.1:ECX.OSXSAVE is set); a
// leaf above the highest one CPUID reports (leaf 0, 0x80000000, or leaf
// 7's subleaf count) reads as zeros; an AMX level only when amxPermit
// grants the tile state, the level below otherwise; a level with a
// Vendor only on that vendor's CPUs (CPUID leaf 0), the level below
// otherwise (when levels has one without a Vendor). Levels that need
// nothing always run; -1 when none runs.
func detectHost(levels []Level, cpu cpuidFunc) int {
	regs := func(leaf uint32, sub int64) [4]uint32 { return [4]uint32{} }
	var xcr0 uint32
	if cpu.cpuid != nil {
		max0, maxE := cpu.cpuid(0, 0)[0], cpu.cpuid(0x80000000, 0)[0]
		regs = func(leaf uint32, sub int64) [4]uint32 {
			limit := max0
			if leaf >= 0x80000000 {
				limit = maxE
			}
			if limit < leaf || sub != 0 && int64(cpu.cpuid(leaf, 0)[0]) < sub {
				return [4]uint32{}
			}
			return cpu.cpuid(leaf, uint32(sub))
		}
		if regs(1, 0)[2]&(1<<27) != 0 {
			xcr0 = cpu.xgetbv()
		}
	}
	best := -1
	for i, l := range levels {
		ok := true
		for _, nb := range l.needs {
			ok = ok && regs(uint32(nb.leaf), nb.sub)[nb.reg]&(1<<nb.bit) != 0
		}
		if l.xcr0 != 0 && int64(xcr0)&l.xcr0 != l.xcr0 {
			ok = false
		}
		if ok {
			best = i
		}
	}
	if best >= 0 && levels[best].AMX && (cpu.amxPermit == nil || !cpu.amxPermit()) {
		best--
	}
	if best > 0 && levels[best].Vendor != "" && levels[best-1].Vendor == "" {
		r := regs(0, 0)
		var v [12]byte
		for k, reg := range []int{1, 3, 2} { // EBX, EDX, ECX
			binary.LittleEndian.PutUint32(v[4*k:], r[reg])
		}
		if string(v[:]) != levels[best].Vendor {
			best--
		}
	}
	return best
}
