package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var testArchs = []string{"sm_80", "sm_90"}

// compilePTX writes Prelude+src into a temporary directory and compiles it
// for arch, returning the PTX text.
func compilePTX(t *testing.T, src, arch string) string {
	t.Helper()
	needTool(t, "clang++-19", ClangCUDA)
	dir := t.TempDir()
	cu := filepath.Join(dir, "k.cu")
	if err := os.WriteFile(cu, []byte(Prelude+src), 0o644); err != nil {
		t.Fatal(err)
	}
	ptx := filepath.Join(dir, "k.ptx")
	if err := CompilePTX(cu, ptx, arch); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var entryRE = regexp.MustCompile(`\.entry\s+(\w+)`)

func TestPreludePTX(t *testing.T) {
	kernels := regexp.MustCompile(`ATTNC_KERNEL void (\w+)`).FindAllStringSubmatch(testKernels, -1)
	for _, arch := range testArchs {
		t.Run(arch, func(t *testing.T) {
			ptx := compilePTX(t, testKernels, arch)
			for _, want := range []string{
				".target " + arch,
				"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
				"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
				"shfl.sync.bfly.b32",
				"shfl.sync.idx.b32",
				"bar.sync",
				".extern .shared .align 16 .b8 attnc_smem_[]",
				"ex2.approx", "lg2.approx", "sin.approx.f32", "cos.approx.f32", "sqrt.rn.f32",
				"cvt.f32.f16", "cvt.rn.f16.f32", "cvt.rn.bf16.f32", "cvt.rn.f16x2.f32", "cvt.rn.bf16x2.f32",
			} {
				if !strings.Contains(ptx, want) {
					t.Errorf("PTX lacks %q", want)
				}
			}
			// Everything is defined: no calls into a library that is not there.
			if strings.Contains(ptx, ".extern .func") {
				t.Errorf("PTX calls an undefined function:\n%s", grepLines(ptx, ".extern .func"))
			}
			entries := map[string]bool{}
			for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
				entries[m[1]] = true
			}
			for _, k := range kernels {
				if !entries[k[1]] {
					t.Errorf("PTX has no entry %s (extern \"C\" kernel)", k[1])
				}
			}
			// Host launchers are not compiled in this branch.
			if strings.Contains(ptx, "launch_") {
				t.Errorf("PTX mentions a host launcher")
			}
		})
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The clang branch announces that it has no host side, and defines the
// fixed-width types itself.
func TestPreludeClangBranch(t *testing.T) {
	src := `
#ifndef ATTNC_NO_HOST
#error "the clang branch must define ATTNC_NO_HOST"
#endif
#if defined(ATTNC_LAUNCH) || defined(ATTNC_EMULATE)
#error "no host names in the clang branch"
#endif
ATTNC_KERNEL void k_types(int8_t *a, uint8_t *b, int16_t *c, uint16_t *d, int32_t *e, uint32_t *f, int64_t *g,
                          uint64_t *h, size_t n, float *o) {
  int i = attnc_tid();
  o[i] = (float)(a[i] + b[i] + c[i] + d[i] + e[i] + f[i] + g[i] + h[i] + (int64_t)n);
}
`
	for _, arch := range testArchs {
		ptx := compilePTX(t, src, arch)
		if !strings.Contains(ptx, ".entry k_types") {
			t.Errorf("%s: no k_types entry", arch)
		}
	}
}

// cudaStub is NVCCStub (stub.go).
const cudaStub = NVCCStub

// The __NVCC__ branch, with its host launchers, compiles under clang against
// cudaStub. (nvcc itself is not installed here; this catches syntax and API
// misuse in that branch.)
func TestPreludeNVCCBranchWithStubHeaders(t *testing.T) {
	clang := needTool(t, "clang++-19", ClangCUDA)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cuda_runtime.h"), []byte(cudaStub), 0o644); err != nil {
		t.Fatal(err)
	}
	src := Prelude + `
#ifdef ATTNC_NO_HOST
#error "the nvcc branch has a host side"
#endif
` + testKernels + asyncKernels
	cu := filepath.Join(dir, "k.cu")
	if err := os.WriteFile(cu, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arch := range testArchs {
		flags, err := PTXFlags(arch)
		if err != nil {
			t.Fatal(err)
		}
		ptx := filepath.Join(dir, arch+".ptx")
		args := append([]string{"-D__NVCC__", "-I" + dir}, flags...)
		if err := runTool(clang, append(args, "-o", ptx, cu)); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(ptx)
		for _, want := range []string{"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "shfl.sync.bfly.b32",
			".entry k_mma_f16", ".entry k_work"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s: PTX lacks %q", arch, want)
			}
		}
	}
}

// Each name of the documented surface is defined in each branch.
func TestPreludeNamesInEveryBranch(t *testing.T) {
	p := Prelude
	cut := func(s, from, to string) string {
		i := strings.Index(s, from)
		j := strings.Index(s, to)
		if i < 0 || j < i {
			t.Fatalf("prelude lacks the markers %q ... %q", from, to)
		}
		return s[i:j]
	}
	nvcc := cut(p, "#if defined(__NVCC__)", "/* ---- clang -x cuda")
	clang := cut(p, "/* ---- clang -x cuda", "/* ---- both GPU branches")
	common := cut(p, "/* ---- both GPU branches", "#endif /* GPU */")
	emu := string(EmuHeader())
	defined := func(text, name string) bool {
		re := regexp.MustCompile(`(?m)^(#define\s+` + name + `\b|(ATTNC_FN_|static inline|typedef)[^\n]*\b` + name + `\b)`)
		// A template's declaration starts on the line after template <...>.
		re2 := regexp.MustCompile(`(?m)^template <[^>\n]*>\n(ATTNC_FN_|static inline)[^\n]*\b` + name + `\b`)
		return re.MatchString(text) || re2.MatchString(text)
	}
	for _, name := range PreludeDeviceNames {
		if !defined(nvcc+common, name) {
			t.Errorf("nvcc branch does not define %s", name)
		}
		if !defined(clang+common, name) {
			t.Errorf("clang branch does not define %s", name)
		}
		if !defined(emu, name) {
			t.Errorf("emulator does not define %s", name)
		}
	}
	for _, name := range PreludeHostNames {
		if !defined(nvcc, name) {
			t.Errorf("nvcc branch does not define %s", name)
		}
		if defined(clang+common, name) {
			t.Errorf("clang branch defines the host name %s", name)
		}
		if !defined(emu, name) {
			t.Errorf("emulator does not define %s", name)
		}
	}
	for _, name := range PreludeTypeNames {
		for branch, text := range map[string]string{"nvcc": nvcc, "clang": clang, "emulator": emu} {
			if !defined(text, name) && !(branch == "nvcc" && name == "cudaStream_t") { // from cuda_runtime.h
				t.Errorf("%s branch does not define the type %s", branch, name)
			}
		}
	}
	if !strings.Contains(p, `#include "`+EmuHeaderName+`"`) {
		t.Errorf("prelude does not include %s", EmuHeaderName)
	}
}

func TestCompilePTXErrors(t *testing.T) {
	for _, arch := range []string{"sm_70", "sm80", "compute_90", ""} {
		if err := CompilePTX("x.cu", "x.ptx", arch); err == nil {
			t.Errorf("CompilePTX(arch %q) succeeded", arch)
		}
	}
	needTool(t, "clang++-19", ClangCUDA)
	dir := t.TempDir()
	cu := filepath.Join(dir, "bad.cu")
	os.WriteFile(cu, []byte(Prelude+"ATTNC_KERNEL void k(float *o) { o[0] = attnc_no_such_function(); }\n"), 0o644)
	err := CompilePTX(cu, filepath.Join(dir, "bad.ptx"), "sm_90")
	if err == nil || !strings.Contains(err.Error(), "attnc_no_such_function") {
		t.Errorf("CompilePTX error = %v, want the compiler's message", err)
	}
}
