//go:build !amd64

package cpu

// hostCPUID: this machine has no CPUID (only levels that need nothing,
// aarch64's NEON, are its levels).
var hostCPUID = cpuidFunc{}
