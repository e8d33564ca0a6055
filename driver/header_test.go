package driver

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestHeaderDeclaresOnlyDefined builds every example for cpu, cuda and
// both: every function <variant>.h declares is defined by an artifact of
// that build (an external define of the .ll, an extern "C" definition of
// the .cu), so a program that calls what the header offers links. The
// default run takes one target set per example, in turn (each set on six
// examples); -examples.all (CI's long pass) every set on every example.
func TestHeaderDeclaresOnlyDefined(t *testing.T) {
	sets := [][]string{{"cpu"}, {"cuda"}, {"cpu", "cuda"}}
	for i, ex := range inScope {
		for j, targets := range sets {
			if !*examplesAll && j != i%len(sets) {
				continue
			}
			out := buildTargets(t, ex, targets...)
			defined := map[string]bool{}
			for _, a := range out.Artifacts {
				var names []string
				switch {
				case strings.HasSuffix(a.Name, ".ll"):
					names = llDefined(string(a.Data))
				case strings.HasSuffix(a.Name, ".cu"):
					names = cuDefined(string(a.Data))
				}
				for _, n := range names {
					defined[n] = true
				}
			}
			for _, v := range out.Variants {
				decls := headerDeclared(string(artifact(out, v.Name+".h")))
				// The parse must see every public entry the manifest lists.
				for _, k := range out.Manifest.Kernels {
					if k.Variant == v.Name && k.Entry && !slices.Contains(decls, k.Symbol) {
						t.Errorf("%s %v: %s.h: parsed no declaration of entry %s (declared: %v)", ex, targets, v.Name, k.Symbol, decls)
					}
				}
				for _, d := range decls {
					if !defined[d] {
						t.Errorf("%s %v: %s.h declares %s, which no artifact defines", ex, targets, v.Name, d)
					}
				}
			}
		}
	}
}

var (
	cComment  = regexp.MustCompile(`(?s)/\*.*?\*/`)
	cPreproc  = regexp.MustCompile(`(?m)^#.*$`)
	cFuncName = regexp.MustCompile(`(\w+)\s*\(`)
	llDefine  = regexp.MustCompile(`(?m)^define ([^@\n]*)@"?([\w.$]+)"?\(`)
	cuExternC = regexp.MustCompile(`(?m)^extern "C" [^(\n]*?(\w+)\([^\n]*\)\s*\{\s*$`)
)

// headerDeclared lists the functions a C header declares: comments,
// preprocessor lines and the extern "C" braces removed, each declaration
// up to ';' names its function before its first '('.
func headerDeclared(h string) []string {
	h = cPreproc.ReplaceAllString(cComment.ReplaceAllString(h, ""), "")
	h = strings.NewReplacer(`extern "C" {`, "", "}", "").Replace(h)
	var out []string
	for _, decl := range strings.Split(h, ";") {
		if m := cFuncName.FindStringSubmatch(decl); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// llDefined lists the functions an LLVM IR module defines with external
// linkage (internal and private ones cannot be linked against).
func llDefined(ll string) []string {
	var out []string
	for _, m := range llDefine.FindAllStringSubmatch(ll, -1) {
		if strings.Contains(m[1], "internal ") || strings.Contains(m[1], "private ") {
			continue
		}
		out = append(out, m[2])
	}
	return out
}

// cuDefined lists the functions a CUDA source defines with C linkage: an
// extern "C" line that opens a body.
func cuDefined(cu string) []string {
	var out []string
	for _, m := range cuExternC.FindAllStringSubmatch(cu, -1) {
		out = append(out, m[1])
	}
	return out
}
