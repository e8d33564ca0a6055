package cli

import (
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
)

const aarch64 = "aarch64-unknown-linux-gnu"

// manifestTriple reads targets.cpu.triple from dir/manifest.json.
func manifestTriple(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Targets map[string]struct{ Triple string } `json:"targets"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Targets["cpu"].Triple
}

// TestBuildTriple: --triple changes the .ll's triple, data layout and CPU
// levels, the manifest records the triple, and bad uses are errors.
func TestBuildTriple(t *testing.T) {
	x86, arm := t.TempDir(), t.TempDir()
	mustRun(t, "build", llama3, "-o", x86)
	mustRun(t, "build", llama3, "--triple", aarch64, "-o", arm)
	if got := manifestTriple(t, x86); got != "x86_64-unknown-linux-gnu" {
		t.Errorf("default manifest triple %q", got)
	}
	if got := manifestTriple(t, arm); got != aarch64 {
		t.Errorf("--triple %s: manifest triple %q", aarch64, got)
	}
	a, _ := os.ReadFile(filepath.Join(x86, "llama3_8b.ll"))
	b, _ := os.ReadFile(filepath.Join(arm, "llama3_8b.ll"))
	if !strings.Contains(string(b), `target triple = "`+aarch64+`"`) || !strings.Contains(string(b), `target datalayout = "e-m:e-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128"`) {
		t.Errorf("--triple %s: the .ll does not say so", aarch64)
	}
	// Beyond the header, the .ll differ in their CPU levels (the work
	// kernels' clones).
	for _, c := range []struct {
		ll     []byte
		levels []string
	}{{a, []string{"_x86_64(", "_x86_64_v3(", "_x86_64_v4("}}, {b, []string{"_neon("}}} {
		for _, l := range c.levels {
			if !strings.Contains(string(c.ll), "_decode_work"+l) {
				t.Errorf("a .ll lacks the decode clone %s", l)
			}
		}
	}
	for _, name := range []string{"llama3_8b.h"} {
		x, _ := os.ReadFile(filepath.Join(x86, name))
		y, _ := os.ReadFile(filepath.Join(arm, name))
		if string(x) != string(y) {
			t.Errorf("%s differs between triples", name)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"build", llama3, "-o", arm, "--triple", "riscv64-unknown-linux-gnu"}, `unknown target triple "riscv64-unknown-linux-gnu" (known: x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu)`},
		{[]string{"build", llama3, "-o", arm, "--triple", aarch64, "--target", "cuda"}, "--triple applies to the cpu target"},
		{[]string{"verify", llama3, "--triple", aarch64, "--target", "cuda"}, "--triple applies to the cpu target"},
		{[]string{"verify", llama3, "--triple", "arm64"}, `unknown target triple "arm64"`},
	} {
		_, e, code := runCLI(t, tc.args...)
		if code != 1 || !strings.Contains(e, tc.want) {
			t.Errorf("attnc %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tc.args, " "), code, e, tc.want)
		}
	}
}

// TestBuildSharedAArch64 links an aarch64 library with --shared and
// verifies it under qemu with --triple.
func TestBuildSharedAArch64(t *testing.T) {
	_, err := cpurt.ToolchainFor(aarch64)
	needtool.Check(t, err)
	p := writeSpec(t, "small.attn", smallSpec)
	dir := t.TempDir()
	mustRun(t, "build", p, "--triple", aarch64, "-o", dir, "--shared")
	f, err := elf.Open(filepath.Join(dir, "small.so"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 || f.Type != elf.ET_DYN {
		t.Errorf("small.so is %v %v, want an aarch64 shared object", f.Machine, f.Type)
	}
	if !cgoEnabled {
		return
	}
	o, e, code := runCLI(t, "verify", p, "--triple", aarch64, "--threads", "1,3")
	if code != 0 || !regexp.MustCompile(`(?m)^[1-9]\d* passed, 0 failed$`).MatchString(o) {
		t.Errorf("verify --triple %s: exit %d\n%s%s", aarch64, code, o, e)
	}
}
