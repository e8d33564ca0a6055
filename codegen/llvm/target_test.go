package llvm

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
)

// TestTargets checks every target's header lines and that its data layout
// is the one LLVM 14's llc itself uses for the triple (llc does not reject a
// module whose layout disagrees, so nothing else would notice).
func TestTargets(t *testing.T) {
	m := module("t", kernel("t_k", nil, ret(ir.Int(0))))
	if Targets[0].Triple != DefaultTriple {
		t.Errorf("Targets[0] is %s, DefaultTriple %s", Targets[0].Triple, DefaultTriple)
	}
	def, err := Emit(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range Targets {
		got, err := LookupTarget(tg.Triple)
		if err != nil || got.Triple != tg.Triple || got.DataLayout != tg.DataLayout {
			t.Errorf("LookupTarget(%s) = %v, %v", tg.Triple, got, err)
		}
		ll, err := EmitFor(m, tg)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{`target datalayout = "` + tg.DataLayout + `"`, `target triple = "` + tg.Triple + `"`} {
			if !strings.Contains(ll, line+"\n") {
				t.Errorf("%s: the module lacks %s", tg.Triple, line)
			}
		}
		if (tg.Triple == DefaultTriple) != (ll == def) {
			t.Errorf("%s: Emit and EmitFor disagree about the default target", tg.Triple)
		}
	}
	if got, err := LookupTarget(""); err != nil || got.Triple != Targets[0].Triple {
		t.Errorf(`LookupTarget("") = %v, %v`, got, err)
	}
	if _, err := LookupTarget("riscv64-unknown-linux-gnu"); err == nil || !strings.Contains(err.Error(), "aarch64-unknown-linux-gnu") {
		t.Errorf("an unknown triple must be rejected with the known ones: %v", err)
	}

	llc := findTool("llc")
	if llc == "" {
		needtool.Check(t, errors.New("llc (LLVM 14) is needed to check the data layouts"))
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "empty.ll")
	if err := os.WriteFile(src, []byte("define i32 @f() {\n  ret i32 0\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	layout := regexp.MustCompile(`target datalayout = "([^"]*)"`)
	for _, tg := range Targets {
		out, _ := runCmd(t, dir, llc, "-mtriple="+tg.Triple, "-stop-after=finalize-isel", "empty.ll", "-o", "-")
		m := layout.FindStringSubmatch(out)
		if m == nil || m[1] != tg.DataLayout {
			t.Errorf("%s: llc's data layout is %v, Targets has %q", tg.Triple, m, tg.DataLayout)
		}
	}
}
