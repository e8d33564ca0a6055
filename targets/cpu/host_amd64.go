package cpu

import (
	"runtime"
	"syscall"
)

// hostCPUID reads this machine's CPUID and XCR0 (host_amd64.s) and asks
// Linux for the AMX tile state (arch_prctl, as amx_permit does).
var hostCPUID = cpuidFunc{
	cpuid: func(leaf, sub uint32) [4]uint32 {
		a, b, c, d := cpuid(leaf, sub)
		return [4]uint32{a, b, c, d}
	},
	xgetbv: func() uint32 { lo, _ := xgetbv(); return lo },
	amxPermit: func() bool {
		if runtime.GOOS != "linux" {
			return false
		}
		_, _, errno := syscall.RawSyscall(sysArchPrctl, archReqXcompPerm, xfeatureXtiledata, 0)
		return errno == 0
	},
}

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// xgetbv executes XGETBV with ECX = 0 (XCR0); only valid when
// CPUID.1:ECX.OSXSAVE is set.
func xgetbv() (lo, hi uint32)
