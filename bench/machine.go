package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// Machine is what the bench reads about the host: the CPU, its caches and
// memory, and the load while it runs (Linux /proc and /sys; fields stay
// zero where they cannot be read).
type Machine struct {
	Arch       string          `json:"arch"`        // runtime.GOARCH
	Model      string          `json:"model"`       // /proc/cpuinfo "model name"
	Family     int             `json:"cpu_family"`  // /proc/cpuinfo "cpu family" (x86)
	ModelID    int             `json:"cpu_model"`   // /proc/cpuinfo "model" (x86)
	MHz        float64         `json:"cpuinfo_mhz"` // /proc/cpuinfo "cpu MHz" of the first CPU (often the TSC rate under a hypervisor)
	OnlineCPUs int             `json:"online_cpus"` // runtime.NumCPU
	LLCBytes   int64           `json:"llc_bytes"`   // the largest data or unified cache of CPU 0
	MemAvail   int64           `json:"mem_available_bytes"`
	Flags      map[string]bool `json:"-"`     // /proc/cpuinfo "flags" (x86) or "Features" (arm64)
	FlagList   []string        `json:"flags"` // Flags, sorted
}

// ReadMachine describes the host.
func ReadMachine() *Machine {
	m := &Machine{Arch: runtime.GOARCH, OnlineCPUs: runtime.NumCPU(), Flags: map[string]bool{}}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.parseCPUInfo(string(b))
	}
	m.LLCBytes = readLLC("/sys/devices/system/cpu/cpu0/cache")
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemAvail = parseMemAvailable(string(b))
	}
	for f := range m.Flags {
		m.FlagList = append(m.FlagList, f)
	}
	sort.Strings(m.FlagList)
	return m
}

// parseCPUInfo reads the first processor block of /proc/cpuinfo.
func (m *Machine) parseCPUInfo(s string) {
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			if strings.TrimSpace(line) == "" && m.Model != "" {
				return // end of the first processor
			}
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			m.Model = v
		case "cpu family":
			m.Family, _ = strconv.Atoi(v)
		case "model":
			m.ModelID, _ = strconv.Atoi(v)
		case "cpu MHz":
			m.MHz, _ = strconv.ParseFloat(v, 64)
		case "flags", "Features":
			for _, f := range strings.Fields(v) {
				m.Flags[f] = true
			}
		}
	}
}

// readLLC returns the size of the highest-level data or unified cache
// listed under dir (/sys/devices/system/cpu/cpu0/cache), 0 if none.
func readLLC(dir string) int64 {
	idx, _ := filepath.Glob(filepath.Join(dir, "index*"))
	level, size := 0, int64(0)
	for _, d := range idx {
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(d, name))
			return strings.TrimSpace(string(b))
		}
		if read("type") == "Instruction" {
			continue
		}
		l, err := strconv.Atoi(read("level"))
		if err != nil {
			continue
		}
		n := parseSize(read("size"))
		if l > level || (l == level && n > size) {
			level, size = l, n
		}
	}
	return size
}

// parseSize reads a sysfs cache size such as "32768K" or "2M".
func parseSize(s string) int64 {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n * mult
}

// parseMemAvailable reads MemAvailable (kB) from /proc/meminfo, in bytes.
func parseMemAvailable(s string) int64 {
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return n << 10
			}
		}
	}
	return 0
}

// LoadAvg is /proc/loadavg's 1, 5 and 15 minute load averages (zeros when
// unreadable).
func LoadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}

// Level is a vector instruction set the yardsticks are compiled for.
type Level struct {
	MCPU        string `json:"mcpu"`         // -mcpu for opt and llc
	Name        string `json:"name"`         // what it means, e.g. "AVX-512"
	VectorBytes int    `json:"vector_bytes"` // widest vector register
	Regs        int    `json:"vector_regs"`  // architectural vector registers
	FMA         bool   `json:"fma"`          // fused multiply-add instructions
	X86         bool   `json:"x86"`          // x86-64: the clock measurement's inline assembly applies
}

// x86 levels, best first: what each needs from /proc/cpuinfo's flags (the
// psABI's x86-64 micro-architecture levels, as LLVM 14 defines them).
var x86Levels = []struct {
	level Level
	needs []string
}{
	{Level{MCPU: "x86-64-v4", Name: "AVX-512", VectorBytes: 64, Regs: 32, FMA: true, X86: true},
		[]string{"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx2", "fma", "f16c", "bmi2", "movbe"}},
	{Level{MCPU: "x86-64-v3", Name: "AVX2+FMA", VectorBytes: 32, Regs: 16, FMA: true, X86: true},
		[]string{"avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm"}},
	{Level{MCPU: "x86-64", Name: "SSE2", VectorBytes: 16, Regs: 16, X86: true}, nil},
}

// Levels lists the vector levels this machine runs, best first: on
// x86-64 the micro-architecture levels its flags allow, elsewhere the
// host's own (-mcpu=native, 16-byte vectors; NEON has fused multiply-add).
func (m *Machine) Levels() []Level {
	if m.Arch != "amd64" {
		return []Level{{MCPU: "native", Name: "native", VectorBytes: 16, Regs: 32, FMA: m.Arch == "arm64"}}
	}
	var ls []Level
	for _, l := range x86Levels {
		ok := true
		for _, f := range l.needs {
			ok = ok && m.Flags[f]
		}
		if ok {
			ls = append(ls, l.level)
		}
	}
	return ls
}

// LevelOf returns the level whose -mcpu is in flags (cpurt.CPUFlags), or
// a level named after them when none matches.
func (m *Machine) LevelOf(flags []string) Level {
	for _, l := range m.Levels() {
		for _, f := range flags {
			if f == "-mcpu="+l.MCPU {
				return l
			}
		}
	}
	return Level{MCPU: strings.TrimPrefix(strings.Join(flags, " "), "-mcpu="), Name: "unknown"}
}
