package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const cpuinfo = `processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC 9654 96-Core Processor
cpu MHz		: 2400.000
flags		: fpu sse2 avx avx2 fma f16c bmi1 bmi2 movbe abm avx512f avx512bw avx512cd avx512dq avx512vl

processor	: 1
model name	: something else
flags		: fpu
`

func TestMachine(t *testing.T) {
	m := &Machine{Arch: "amd64", Flags: map[string]bool{}}
	m.parseCPUInfo(cpuinfo)
	if m.Model != "AMD EPYC 9654 96-Core Processor" || m.Family != 25 || m.ModelID != 17 || m.MHz != 2400 || !m.Flags["avx512vl"] {
		t.Errorf("parsed %+v", m)
	}
	names := func(ls []Level) string {
		var s []string
		for _, l := range ls {
			s = append(s, l.MCPU)
		}
		return strings.Join(s, ",")
	}
	if got := names(m.Levels()); got != "x86-64-v4,x86-64-v3,x86-64" {
		t.Errorf("levels %s", got)
	}
	delete(m.Flags, "avx512bw")
	if got := names(m.Levels()); got != "x86-64-v3,x86-64" {
		t.Errorf("levels without avx512bw: %s", got)
	}
	if got := names(fmaLevels(m.Levels())); got != "x86-64-v3" {
		t.Errorf("fma levels: %s", got)
	}
	delete(m.Flags, "fma")
	if got := names(m.Levels()); got != "x86-64" {
		t.Errorf("levels without fma: %s", got)
	}
	if got := names(fmaLevels(m.Levels())); got != "x86-64" {
		t.Errorf("fma levels without fma: %s", got)
	}
	if l := m.LevelOf([]string{"-mcpu=x86-64"}); l.VectorBytes != 16 || l.FMA {
		t.Errorf("LevelOf x86-64: %+v", l)
	}
	if l := m.LevelOf([]string{"-mcpu=znver3"}); l.Name != "unknown" || l.MCPU != "znver3" {
		t.Errorf("LevelOf znver3: %+v", l)
	}
	arm := &Machine{Arch: "arm64", Flags: map[string]bool{}}
	if ls := arm.Levels(); len(ls) != 1 || ls[0].MCPU != "native" || !ls[0].FMA || ls[0].X86 {
		t.Errorf("arm64 levels: %+v", ls)
	}

	for s, want := range map[string]int64{"32768K": 32 << 20, "2M": 2 << 20, "1G": 1 << 30, "512": 512, "x": 0, "-1K": 0} {
		if got := parseSize(s); got != want {
			t.Errorf("parseSize(%q) = %d, want %d", s, got, want)
		}
	}
	if got := parseMemAvailable("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"); got != 2<<20 {
		t.Errorf("MemAvailable = %d", got)
	}
	dir := t.TempDir()
	for i, c := range []struct{ level, typ, size string }{{"1", "Data", "48K"}, {"1", "Instruction", "32K"}, {"2", "Unified", "1024K"}, {"3", "Unified", "32768K"}} {
		d := filepath.Join(dir, "index"+string(rune('0'+i)))
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "level"), []byte(c.level+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "type"), []byte(c.typ+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "size"), []byte(c.size+"\n"), 0o644)
	}
	if got := readLLC(dir); got != 32<<20 {
		t.Errorf("LLC = %d", got)
	}
	if got := readLLC(t.TempDir()); got != 0 {
		t.Errorf("LLC of nothing = %d", got)
	}
}

func TestStreamBytes(t *testing.T) {
	if n, note := streamBytes(&Machine{LLCBytes: 32 << 20, MemAvail: 16 << 30}); n != 1<<30 || note != "" {
		t.Errorf("32 MiB LLC: %d %q", n, note)
	}
	if n, _ := streamBytes(&Machine{LLCBytes: 256 << 20, MemAvail: 16 << 30}); n != 2<<30 {
		t.Errorf("256 MiB LLC: %d, want 8 x LLC", n)
	}
	if n, note := streamBytes(&Machine{LLCBytes: 32 << 20, MemAvail: 1 << 30}); n != 512<<20 || note == "" {
		t.Errorf("1 GiB available: %d %q", n, note)
	}
}
