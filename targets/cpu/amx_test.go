package cpu

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/ir"
)

// amxLevel is the x86-64 level with AMX tiles.
const amxLevel = "x86-64-amx"

// overrideFunc replaces the definition of the internal function @name in
// ll by one with body (the original stays, renamed @name.hw and unused):
// tests make a CPU without AMX look like one with it, which no product
// switch can.
func overrideFunc(t *testing.T, ll, name, ret, body string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^define internal ` + regexp.QuoteMeta(ret) + ` @` + regexp.QuoteMeta(name) + `\(\)`)
	if len(re.FindAllStringIndex(ll, -1)) != 1 {
		t.Fatalf("no single definition of @%s() in the .ll", name)
	}
	ll = re.ReplaceAllLiteralString(ll, "define internal "+ret+" @"+name+".hw()")
	return ll + fmt.Sprintf("\ndefine internal %s @%s() {\nentry:\n\t%s\n}\n", ret, name, body)
}

// TestCPULevelAMX runs <prefix>_cpu_level in fresh processes. Detection
// alone never picks x86-64-amx (Manual until it has run on AMX hardware):
// without ATTNC_CPU_LEVEL a module with an x86-64-amx clone runs at most
// x86-64-v4-bf16, here and with detect_level overridden to report AMX.
// Forced, a library with the clone runs it only where the CPU has AMX and
// the OS grants the tile state (overridden: granted runs 4, refused the
// level below, 3), and refuses it (-1, NULL) on a CPU without AMX; a
// library without the clone runs its best level below (x86-64-v4-bf16,
// or x86-64-v4 without a bf16 clone) wherever the CPU runs that.
func TestCPULevelAMX(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("the levels tested are x86-64's")
	}
	tc := lltest.NeedToolchain(t)
	lvl := lltest.Kernel("lvl", []*ir.Param{lltest.Buf("out", ir.I32)},
		&ir.CallStmt{Result: "l", Fn: "rt.cpu_level"},
		lltest.Store("out", ir.Int(0), lltest.I32("l")),
		lltest.Ret(ir.Int(0)))
	clone := func(l string) *ir.Kernel {
		return &ir.Kernel{Name: "k" + strings.ReplaceAll("_"+l, "-", "_"), Role: ir.RoleDecode, Level: l, Body: lltest.Blk(lltest.Ret(ir.Int(0)))}
	}
	driver := `
int32_t lvl(int32_t*);
const char *lvl_cpu_level(void);
int main(void) {
	const char *n = lvl_cpu_level();
	int32_t l = -5;
	lvl(&l);
	printf("name %s\nindex %d\n", n ? n : "(null)", l);
	return 0;
}
`
	flags := lltest.CPUInfoFlags()
	v4 := flags["avx512f"] && flags["avx512bw"] && flags["avx512dq"] && flags["avx512vl"] && flags["avx512cd"] && flags["avx2"] && flags["fma"]
	hasBF16 := v4 && flags["avx512_bf16"]
	hasAMX := hasBF16 && flags["amx_tile"] && flags["amx_bf16"]
	os.Unsetenv(LevelEnv)
	run := func(exe string, env ...string) map[string]string {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		return lltest.Results(t, string(out))
	}
	want := func(what string, r map[string]string, name string, index int) {
		t.Helper()
		if r["name"] != name || r["index"] != fmt.Sprint(index) {
			t.Errorf("%s: %v, want %s (%d)", what, r, name, index)
		}
	}
	forced := LevelEnv + "=" + amxLevel
	for _, c := range []struct {
		name   string
		clones []string
	}{{"amx+bf16", []string{bf16Level, amxLevel}}, {"bf16", []string{bf16Level}}, {"none", nil}} {
		ks := []*ir.Kernel{lvl}
		for _, l := range c.clones {
			ks = append(ks, clone(l))
		}
		m := lltest.Module("lvl", ks...)
		ll, err := emitLL(m, Arches[0])
		if err != nil {
			t.Fatal(err)
		}
		withAMX := len(c.clones) == 2
		if strings.Contains(ll, ".amx_permit") != withAMX {
			t.Errorf("%s: the .ll has amx_permit: %v", c.name, !withAMX)
		}
		exe := tc.Build(t, ll, driver).Exe
		if r := run(exe); r["name"] == amxLevel || r["index"] == "4" {
			t.Errorf("%s: detection picked %s: %v", c.name, amxLevel, r)
		}
		r := run(exe, forced)
		switch {
		case withAMX && hasAMX:
			// Granted on Linux >= 5.16 with AMX.
			want(c.name+", forced on an AMX CPU", r, amxLevel, 4)
		case withAMX:
			want(c.name+", forced on a CPU without AMX", r, "(null)", -1)
		case len(c.clones) == 1 && hasBF16:
			want(c.name+", forced, no clone", r, bf16Level, 3)
		case len(c.clones) == 0 && v4:
			want(c.name+", forced, no clone", r, "x86-64-v4", 2)
		}
		if !withAMX {
			continue
		}
		// detect_level overridden to report AMX (index 4); amx_permit to
		// grant or refuse the tile state.
		for _, granted := range []bool{true, false} {
			fake := overrideFunc(t, ll, "lvl.detect_level", "i32", "ret i32 4")
			fake = overrideFunc(t, fake, "lvl.amx_permit", "i1", fmt.Sprintf("ret i1 %v", granted))
			exe := tc.Build(t, fake, driver).Exe
			want(fmt.Sprintf("detect says AMX, granted %v, not forced", granted), run(exe), bf16Level, 3)
			want(fmt.Sprintf("detect says AMX, granted %v, empty", granted), run(exe, LevelEnv+"="), bf16Level, 3)
			if granted {
				want("detect says AMX, granted, forced", run(exe, forced), amxLevel, 4)
			} else {
				want("detect says AMX, refused, forced", run(exe, forced), bf16Level, 3)
			}
			want("detect says AMX, forced x86-64-v4", run(exe, LevelEnv+"=x86-64-v4"), "x86-64-v4", 2)
		}
	}
}
