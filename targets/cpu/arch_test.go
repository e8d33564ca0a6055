package cpu

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
)

// TestArches checks every architecture's header lines and that its data
// layout is the one LLVM 14's llc itself uses for the triple (llc does not
// reject a module whose layout disagrees, so nothing else would notice).
func TestArches(t *testing.T) {
	m := lltest.Module("t", lltest.Kernel("t_k", nil, lltest.Ret(ir.Int(0))))
	if Arches[0].Triple != DefaultTriple {
		t.Errorf("Arches[0] is %s, DefaultTriple %s", Arches[0].Triple, DefaultTriple)
	}
	for _, a := range Arches {
		got, err := LookupArch(a.Triple)
		if err != nil || got.Triple != a.Triple || got.DataLayout != a.DataLayout {
			t.Errorf("LookupArch(%s) = %v, %v", a.Triple, got, err)
		}
		ll, err := emitLL(m, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{`target datalayout = "` + a.DataLayout + `"`, `target triple = "` + a.Triple + `"`} {
			if !strings.Contains(ll, line+"\n") {
				t.Errorf("%s: the module lacks %s", a.Triple, line)
			}
		}
	}
	if got, err := LookupArch(""); err != nil || got.Triple != Arches[0].Triple {
		t.Errorf(`LookupArch("") = %v, %v`, got, err)
	}
	if _, err := LookupArch("riscv64-unknown-linux-gnu"); err == nil || !strings.Contains(err.Error(), "aarch64-unknown-linux-gnu") {
		t.Errorf("an unknown triple must be rejected with the known ones: %v", err)
	}

	llc := lltest.FindTool("llc")
	if llc == "" {
		needtool.Check(t, errors.New("llc (LLVM 14) is needed to check the data layouts"))
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "empty.ll")
	if err := os.WriteFile(src, []byte("define i32 @f() {\n  ret i32 0\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	layout := regexp.MustCompile(`target datalayout = "([^"]*)"`)
	for _, a := range Arches {
		out, _ := lltest.RunCmd(t, dir, llc, "-mtriple="+a.Triple, "-stop-after=finalize-isel", "empty.ll", "-o", "-")
		m := layout.FindStringSubmatch(out)
		if m == nil || m[1] != a.DataLayout {
			t.Errorf("%s: llc's data layout is %v, Arches has %q", a.Triple, m, a.DataLayout)
		}
	}
}
