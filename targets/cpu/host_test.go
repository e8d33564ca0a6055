package cpu

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
)

// fakeCPU is a machine's CPUID and XCR0 for detectHost: the leaves it has
// (leaf 0's and 0x80000000's EAX say the highest, its EBX, EDX and ECX the
// vendor), every bit of the named features set.
func fakeCPU(t *testing.T, vendor string, xcr0 uint32, feats ...string) cpuidFunc {
	var v [12]byte
	copy(v[:], vendor)
	le := binary.LittleEndian
	regs := map[[2]uint32][4]uint32{{0, 0}: {7, le.Uint32(v[0:]), le.Uint32(v[8:]), le.Uint32(v[4:])},
		{0x80000000, 0}: {0x80000001}, {7, 0}: {1}}
	for _, f := range feats {
		found := false
		for _, nb := range bitsAMX {
			if nb.name == f {
				r := regs[[2]uint32{uint32(nb.leaf), uint32(nb.sub)}]
				r[nb.reg] |= 1 << nb.bit
				regs[[2]uint32{uint32(nb.leaf), uint32(nb.sub)}] = r
				found = true
			}
		}
		if !found {
			t.Fatalf("no CPUID bit %s", f)
		}
	}
	return cpuidFunc{cpuid: func(leaf, sub uint32) [4]uint32 {
		if leaf == 7 && sub == 0 {
			r := regs[[2]uint32{7, 0}]
			r[0] = 1 // leaf 7 has subleaf 1
			return r
		}
		return regs[[2]uint32{leaf, sub}]
	}, xgetbv: func() uint32 { return xcr0 }}
}

// TestDetectHost: the Go detection behind --cpu-levels host picks what
// the generated detection picks (defineDetectLevel): the highest level
// whose bits and OS state are there, x86-64-amx only when the OS grants
// the tile state (the level below when it refuses), x86-64-v4-bf16 only
// on AMD's CPUs (x86-64-v4 on Intel's, also when the tile state is
// refused), the baseline on a bare x86-64.
func TestDetectHost(t *testing.T) {
	v3 := []string{"sse3", "ssse3", "cx16", "sse4.1", "sse4.2", "popcnt", "lahf_lm", "fma", "movbe", "osxsave", "avx", "f16c", "bmi1", "avx2", "bmi2", "abm"}
	v4 := append(append([]string(nil), v3...), "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl")
	bf16 := append(append([]string(nil), v4...), "avx512_bf16")
	amx := append(append([]string(nil), bf16...), "amx_bf16", "amx_tile")
	const amd, intel = "AuthenticAMD", "GenuineIntel"
	for _, c := range []struct {
		name   string
		vendor string
		xcr0   uint32
		feats  []string
		want   string
	}{
		{"bare", intel, 0, nil, "x86-64"},
		{"v3", amd, 0x6, v3, "x86-64-v3"},
		{"v3 without OS AVX state", intel, 0x2, v3, "x86-64"},
		{"v3 but movbe", amd, 0x6, v3[:8], "x86-64"},
		{"v4", intel, 0xe6, v4, "x86-64-v4"},
		{"v4 without OS AVX-512 state", intel, 0x6, v4, "x86-64-v3"},
		{"zen4", amd, 0xe6, bf16, "x86-64-v4-bf16"},
		{"zen4 without OS AVX-512 state", amd, 0x6, bf16, "x86-64-v3"},
		{"cooper lake", intel, 0xe6, bf16, "x86-64-v4"},
		{"bf16, no vendor", "", 0xe6, bf16, "x86-64-v4"},
		{"sapphire rapids", intel, xcr0AMX, amx, "x86-64-amx"},
		{"sapphire rapids, tile state refused", intel, xcr0AMX, amx, "x86-64-v4"},
		{"sapphire rapids without OS tile state", intel, 0xe6, amx, "x86-64-v4"},
		{"amx on an AMD CPU, tile state refused", amd, xcr0AMX, amx, "x86-64-v4-bf16"},
	} {
		cpu := fakeCPU(t, c.vendor, c.xcr0, c.feats...)
		asked := 0
		cpu.amxPermit = func() bool { asked++; return !strings.Contains(c.name, "refused") }
		got := detectHost(x86Levels, cpu)
		if got < 0 || x86Levels[got].Name != c.want {
			t.Errorf("%s: level %d, want %s", c.name, got, c.want)
		}
		if wantAsked := c.xcr0 == xcr0AMX && len(c.feats) == len(amx); (asked == 1) != wantAsked || asked > 1 {
			t.Errorf("%s: the tile state asked for %d times", c.name, asked)
		}
	}
	// Without a way to ask (amxPermit nil) the tile state is refused.
	if got := detectHost(x86Levels, fakeCPU(t, amd, xcr0AMX, amx...)); got < 0 || x86Levels[got].Name != "x86-64-v4-bf16" {
		t.Errorf("amx on an AMD CPU, nothing to ask: level %d, want x86-64-v4-bf16", got)
	}
	// Without the level below x86-64-v4-bf16, it runs on any vendor's CPU.
	if got := detectHost(x86Levels[3:4], fakeCPU(t, intel, 0xe6, bf16...)); got != 0 {
		t.Errorf("cooper lake, x86-64-v4-bf16 alone: %d, want 0", got)
	}
	// Without the baseline (a build restricted to higher levels), a CPU
	// that runs none of them has no level.
	if got := detectHost(x86Levels[2:], fakeCPU(t, intel, 0x6, v3...)); got != -1 {
		t.Errorf("v3 CPU, levels from x86-64-v4: %d, want -1", got)
	}
	if got := detectHost(aarch64Levels, cpuidFunc{}); got != 0 {
		t.Errorf("aarch64: %d, want 0 (neon)", got)
	}
}

// TestResolveLevels: names are levels of the triple, in the table's order
// whatever the order given, each once; host is this machine's level; an
// unknown name, an empty list and host for another architecture are
// errors naming the known levels.
func TestResolveLevels(t *testing.T) {
	x86, _ := LookupArch("")
	arm, _ := LookupArch("aarch64-unknown-linux-gnu")
	got, err := x86.ResolveLevels([]string{"x86-64-v4", " x86-64", "x86-64-v4"})
	if err != nil || len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Errorf("x86-64-v4,x86-64,x86-64-v4: %v %v, want [0 2]", got, err)
	}
	for _, c := range []struct {
		a     Arch
		names []string
		want  string
	}{
		{x86, []string{"x86-64-v5"}, `unknown CPU level "x86-64-v5" for x86_64-unknown-linux-gnu (known: x86-64, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-amx, host)`},
		{x86, []string{"neon"}, `unknown CPU level "neon"`},
		{x86, nil, "no CPU level given for x86_64-unknown-linux-gnu"},
		{arm, []string{"x86-64"}, `unknown CPU level "x86-64" for aarch64-unknown-linux-gnu (known: neon, host)`},
	} {
		if _, err := c.a.ResolveLevels(c.names); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v on %s: %v, want %q", c.names, c.a.Triple, err, c.want)
		}
	}
	other := arm
	if runtime.GOARCH == "arm64" {
		other = x86
	}
	if _, err := other.ResolveLevels([]string{"host"}); err == nil || !strings.Contains(err.Error(), "is not a") {
		t.Errorf("host for %s on %s: %v", other.Triple, runtime.GOARCH, err)
	}
	if runtime.GOARCH == "amd64" {
		h, err := x86.ResolveLevels([]string{"host"})
		if err != nil || len(h) != 1 || h[0] != detectHost(x86Levels, hostCPUID) {
			t.Errorf("host: %v %v", h, err)
		}
	}
}
