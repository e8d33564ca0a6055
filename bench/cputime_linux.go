package bench

import (
	"syscall"
	"unsafe"
)

// threadCPU is the calling thread's CPU time in seconds
// (CLOCK_THREAD_CPUTIME_ID): time it ran, not time it waited for a core.
func threadCPU() float64 {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return float64(ts.Sec) + 1e-9*float64(ts.Nsec)
}
