package driver

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	cudatarget "github.com/attnc/attnc/targets/cuda"
)

func needTools(t *testing.T) {
	t.Helper()
	needtool.Check(t, cpurt.Tools())
}

func buildExample(t *testing.T, name string) *Output {
	t.Helper()
	return buildExampleWith(t, name, Options{})
}

// buildExampleWith is buildExample with options.
func buildExampleWith(t *testing.T, name string, opt Options) *Output {
	t.Helper()
	vs, err := ParseSpecs([]string{filepath.Join("..", "examples", name+".attn")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Build(vs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func artifact(o *Output, name string) []byte {
	for _, a := range o.Artifacts {
		if a.Name == name {
			return a.Data
		}
	}
	return nil
}

func TestDeterministic(t *testing.T) {
	a, b := buildExample(t, "llama3_8b"), buildExample(t, "llama3_8b")
	if len(a.Artifacts) != 3 {
		t.Fatalf("artifacts: %d", len(a.Artifacts))
	}
	for i := range a.Artifacts {
		if a.Artifacts[i].Name != b.Artifacts[i].Name || !bytes.Equal(a.Artifacts[i].Data, b.Artifacts[i].Data) {
			t.Errorf("%s differs between two builds", a.Artifacts[i].Name)
		}
	}
	// Both targets, the examples of cudaExamples at once (every example
	// with -examples.all, CI's long pass).
	var specs []string
	exs := cudaExamples()
	for _, ex := range exs {
		specs = append(specs, filepath.Join("..", "examples", ex+".attn"))
	}
	vs, err := ParseSpecs(specs)
	if err != nil {
		t.Fatal(err)
	}
	x, err := Build(vs, Options{Targets: []string{"cpu", "cuda"}})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := Build(vs, Options{Targets: []string{"cpu", "cuda"}})
	if len(x.Artifacts) != 3*len(exs)+1 {
		t.Fatalf("artifacts: %d", len(x.Artifacts))
	}
	for i := range x.Artifacts {
		if !bytes.Equal(x.Artifacts[i].Data, y.Artifacts[i].Data) {
			t.Errorf("%s differs between two builds", x.Artifacts[i].Name)
		}
	}
}

// TestVectorized checks that opt -O3 vectorizes the generated kernels'
// inner loops (dot products, accumulator updates, conversions) in every
// CPU level's clone: SSE (4 lanes), AVX2 (8) and AVX-512 (16).
func TestVectorized(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	for _, ex := range vectorizedExamples() {
		ll := filepath.Join(dir, ex+".ll")
		if err := os.WriteFile(ll, artifact(buildExample(t, ex), ex+".ll"), 0o644); err != nil {
			t.Fatal(err)
		}
		// No -mcpu: each CPU level's clone compiles for its own level.
		cmd := exec.Command("opt", "-O3", "-pass-remarks=loop-vectorize", "-S", ll, "-o", filepath.Join(dir, ex+".opt.ll"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("opt: %v\n%s", err, stderr.String())
		}
		n := len(regexp.MustCompile(`remark: .*vectorized loop`).FindAllString(stderr.String(), -1))
		if n < 15 {
			t.Errorf("%s: %d loops vectorized, want >= 5 per CPU level\n%s", ex, n, stderr.String())
		}
		opt, _ := os.ReadFile(filepath.Join(dir, ex+".opt.ll"))
		for level, width := range map[string]string{"x86_64_v4": "<16 x float>", "x86_64_v3": "<8 x float>", "x86_64": "<4 x float>"} {
			if !strings.Contains(string(opt), "fmul reassoc contract "+width) {
				t.Errorf("%s: no %s multiply in the optimized kernels (level %s)", ex, width, level)
			}
		}
		t.Logf("%s: %d loops vectorized", ex, n)
	}
}

// hostLevels are the CPU levels of the tests that run kernels but test no
// level (Options.CPULevels): the level this machine's entries run (host,
// or the one $ATTNC_CPU_LEVEL forces), one opt and llc compile of each
// work kernel instead of three or four.
func hostLevels() []string {
	if l := os.Getenv("ATTNC_CPU_LEVEL"); l != "" {
		return []string{l}
	}
	return []string{"host"}
}

// TestLinksIntoC compiles a C program against the generated header and
// links the .ll with only -lm -lpthread, then calls the decode and prefill
// entries on a one-token cache: with a single visible position, o equals
// that position's V row and lse its scaled score. The .ll holds this
// machine's level's clones only (hostLevels).
func TestLinksIntoC(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	o := buildExampleWith(t, "mha_softcap", Options{CPULevels: hostLevels()})
	if err := o.Write(dir, nil); err != nil {
		t.Fatal(err)
	}
	prog := `#include "mha_softcap.h"
#include <stdio.h>
#include <math.h>
int main(void) {
  /* one sequence, one cached token, NHD page [16][8][64] */
  static float q[8*64], k[16*8*64], v[16*8*64], o[8*64], lse[8];
  for (int i = 0; i < 8*64; i++) { q[i] = 0.01f * (i % 7); k[i] = 0.02f * (i % 5); v[i] = (float)(i % 64) / 64.0f; }
  int qo_indptr[2] = {0, 1}, kv_indptr[2] = {0, 1}, kv_indices[1] = {0}, last[1] = {1};
  mha_softcap_set_num_threads(2);
  int st = mha_softcap_prefill(q, qo_indptr, k, v, 1, kv_indptr, kv_indices, last, 1, o, lse);
  if (st != MHA_SOFTCAP_OK) { printf("status %d %s\n", st, mha_softcap_strerror(st)); return 1; }
  for (int h = 0; h < 8; h++) for (int d = 0; d < 64; d++)
    if (fabsf(o[h*64+d] - v[h*64+d]) > 1e-6f) { printf("o[%d][%d]=%g\n", h, d, o[h*64+d]); return 1; }
  float s = 0; for (int d = 0; d < 64; d++) s += q[d] * k[d];
  s = 30.0f * tanhf(s * 0.125f / 30.0f);
  if (fabsf(lse[0] - s) > 1e-5f) { printf("lse %g want %g\n", lse[0], s); return 1; }
  st = mha_softcap_prefill(q, qo_indptr, k, v, 0, kv_indptr, kv_indices, last, 1, o, lse);
  if (st != MHA_SOFTCAP_BAD_PAGE_ID) { printf("bad page accepted: %d\n", st); return 1; }
  printf("ok %s\n", mha_softcap_strerror(st));
  return 0;
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	run("opt", "-O3", "mha_softcap.ll", "-o", "k.bc")
	run("llc", "-O3", "-relocation-model=pic", "-filetype=obj", "k.bc", "-o", "k.o")
	run("gcc", "-Wall", "-Werror", "-std=c11", "main.c", "k.o", "-o", "main", "-lm", "-lpthread")
	if out := run("./main"); !strings.HasPrefix(out, "ok ") {
		t.Fatal(out)
	}
}

// inScope are the examples under examples/ (every one generates kernels),
// by name, sorted.
var inScope = func() []string {
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.attn"))
	if err != nil {
		panic(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".attn"))
	}
	sort.Strings(names)
	return names
}()

// TestCUDAToPTX compiles every generated CUDA kernel of cudaExamples
// (every in-scope example with -examples.all, CI's long pass) to PTX for
// sm_80 and sm_90 (cudaOneArch at one of them by default) with clang-19
// (no CUDA headers): the f16/bf16 variants
// must use tensor cores, all must use warp shuffles. Each example is a
// clang compile per architecture (the package's most expensive step after
// ptxas); the default run's other examples generate their .cu in
// TestDeterministic and TestHeaderDeclaresOnlyDefined.
func TestCUDAToPTX(t *testing.T) {
	_, err := cuda.ClangCUDA()
	needtool.Check(t, err)
	dir := t.TempDir()
	for _, ex := range cudaExamples() {
		out := buildTargets(t, ex, "cuda")
		vs := out.Variants
		cu := filepath.Join(dir, ex+".cu")
		if err := os.WriteFile(cu, artifact(out, ex+".cu"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, arch := range cudaArchs(ex) {
			ptx := filepath.Join(dir, ex+"."+arch+".ptx")
			start := time.Now()
			if err := cudatarget.CompilePTX(cu, ptx, arch); err != nil {
				t.Fatalf("%s %s: %v", ex, arch, err)
			}
			t.Logf("%s %s: PTX in %v", ex, arch, time.Since(start).Round(time.Millisecond))
			text, _ := os.ReadFile(ptx)
			// The work kernels of the roles the example lists
			// (packed_docs is a prefill alone).
			var works []string
			for _, k := range vs[0].Kernels {
				switch k.Role {
				case ir.RolePrefill:
					works = append(works, "_prefill_work")
				case ir.RoleDecode:
					works = append(works, "_decode_work", "_decode_split_work", "_decode_merge_work")
				case ir.RoleMergeState:
					works = append(works, "_merge_state_work")
				}
			}
			if len(works) == 0 {
				t.Errorf("%s: no attention role", ex)
			}
			for _, k := range works {
				if !strings.Contains(string(text), ".entry "+ex+k) {
					t.Errorf("%s %s: no kernel %s%s in the PTX", ex, arch, ex, k)
				}
			}
			if !strings.Contains(string(text), "shfl.sync.bfly") {
				t.Errorf("%s %s: no warp shuffle", ex, arch)
			}
			// Tensor cores serve f16/bf16 storage (with inline RoPE, the
			// rotated Q·Kᵀ stays in f32 on the SIMT path but P·V takes
			// them).
			half := vs[0].DType.Info().TensorCore
			if half != strings.Contains(string(text), "mma.sync.aligned.m16n8k16") {
				t.Errorf("%s %s (%s): tensor-core mma present = %v", ex, arch, vs[0].DType, !half)
			}
			// K/V/Q staging moves 16 bytes at a time: 128-bit loads, or
			// (pipeline-kv) 16-byte cp.async into shared memory.
			if half && !strings.Contains(string(text), "ld.global.nc.v4.u32") &&
				!regexp.MustCompile(`cp\.async\.c[ag]\.shared\.global(\.L2::128B)? \[[^]]+\], \[[^]]+\], 16`).Match(text) {
				t.Errorf("%s %s: K/V/Q staging without 128-bit loads or 16-byte cp.async", ex, arch)
			}
		}
	}
}

// TestCUDANVCCBranch compiles the .cu of cudaExamples (every example with
// -examples.all) as nvcc would see it (the __NVCC__ branch: host launchers and device kernels), with
// clang-19 and a stub <cuda_runtime.h>, since nvcc is not installed here.
func TestCUDANVCCBranch(t *testing.T) {
	clang, err := cuda.ClangCUDA()
	needtool.Check(t, err)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cuda_runtime.h"), []byte(cuda.NVCCStub), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ex := range cudaExamples() {
		out := buildTargets(t, ex, "cuda")
		cu := filepath.Join(dir, ex+".cu")
		if err := os.WriteFile(cu, artifact(out, ex+".cu"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, side := range [][]string{{"--cuda-host-only", "-c"}, {"--cuda-device-only", "-S"}} {
			cmd := exec.Command(clang, "-x", "cuda", side[0], side[1], "--cuda-gpu-arch=sm_90", "-nocudainc", "-nocudalib", "-Werror",
				"-Xclang", "-target-feature", "-Xclang", "+ptx78", "-D__NVCC__", "-I"+dir, "-O1", "-o", filepath.Join(dir, ex+side[0]+".out"), cu)
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s", ex, side[0], err, msg)
			}
		}
	}
}

// buildTargets builds one example for the given targets, once per test
// binary (builds): the Output is shared and must not be modified.
func buildTargets(t *testing.T, ex string, targets ...string) *Output {
	t.Helper()
	b, _ := builds.LoadOrStore(ex+" "+strings.Join(targets, ","), &buildOnce{})
	bo := b.(*buildOnce)
	bo.once.Do(func() {
		vs, err := ParseSpecs([]string{filepath.Join("..", "examples", ex+".attn")})
		if err != nil {
			bo.err = err
			return
		}
		bo.out, bo.err = Build(vs, Options{Targets: targets})
	})
	if bo.err != nil {
		t.Fatal(bo.err)
	}
	return bo.out
}

// TestManifestStorageDTypes: every kernel in the manifest, CPU or CUDA,
// entry or not, states the storage dtype of its cache and query buffers
// (f16 for llama3_8b), not the i16 bits that legalization leaves.
func TestManifestStorageDTypes(t *testing.T) {
	out := buildTargets(t, "llama3_8b", "cpu", "cuda")
	for _, k := range out.Manifest.Kernels {
		for _, a := range k.Args {
			switch a.Name {
			case "q", "k_pages", "v_pages", "o", "v", "v_other":
				if a.DType != "f16" {
					t.Errorf("%s %s: %s has dtype %s, want f16", k.Target, k.Symbol, a.Name, a.DType)
				}
			}
		}
	}
}

// TestManifestQuantized: a quantized cache's kernels, CPU and CUDA, state
// the codes' dtype on the pools (e4m3 for llama3_8b_fp8, the queries and
// outputs f16), the scales as f32[1] right after the pools, and
// kv_dtype/kv_scale among the constraints; merge_state and copy_page (which
// moves codes) take no scale.
func TestManifestQuantized(t *testing.T) {
	out := buildTargets(t, "llama3_8b_fp8", "cpu", "cuda")
	for _, k := range out.Manifest.Kernels {
		var names []string
		for _, a := range k.Args {
			names = append(names, a.Name)
			want := map[string]string{"q": "f16", "o": "f16", "k": "f16", "v": "f16", "k_pages": "e4m3", "v_pages": "e4m3", "k_scale": "f32", "v_scale": "f32"}[a.Name]
			if want != "" && a.DType != want {
				t.Errorf("%s %s: %s has dtype %s, want %s", k.Target, k.Symbol, a.Name, a.DType, want)
			}
		}
		args := strings.Join(names, ",")
		scaled := k.Role != "merge_state" && k.Role != "copy_page"
		if scaled && strings.Contains(args, "k_pages,v_pages") && !strings.Contains(args, "k_pages,v_pages,k_scale,v_scale,num_pages") {
			t.Errorf("%s %s: arguments %s", k.Target, k.Symbol, args)
		}
		if !scaled && strings.Contains(args, "scale") {
			t.Errorf("%s %s: merge_state takes %s", k.Target, k.Symbol, args)
		}
		if k.Constraints["kv_dtype"] != "e4m3" || k.Constraints["kv_scale"] != "per_tensor" {
			t.Errorf("%s %s: constraints %v", k.Target, k.Symbol, k.Constraints)
		}
	}
}

// TestManifestLSEBase: the manifest's top-level lse_base is the build's
// common base ("mixed" when variants differ), each variant states its own,
// every kernel's constraints carry it, and the header says it.
func TestManifestLSEBase(t *testing.T) {
	parse := func(src string) []*ir.Variant {
		vs, err := frontend.Parse("lse.attn", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	e := "variant ve {\n heads qo = 2\n head_dim 64\n}\n"
	two := "variant v2 {\n heads qo = 2\n head_dim 64\n lse base = 2\n}\n"
	for _, c := range []struct{ src, top string }{{e, "e"}, {two, "2"}, {e + two, "mixed"}} {
		vs := parse(c.src)
		out, err := Build(vs, Options{Targets: []string{"cpu", "cuda"}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Manifest.LSEBase != c.top {
			t.Errorf("%v: top-level lse_base %q, want %q", c.src, out.Manifest.LSEBase, c.top)
		}
		for _, vm := range out.Manifest.Variants {
			if want := map[string]string{"ve": "e", "v2": "2"}[vm.Name]; vm.LSEBase != want {
				t.Errorf("variant %s: lse_base %q, want %q", vm.Name, vm.LSEBase, want)
			}
		}
		for _, k := range out.Manifest.Kernels {
			want := "e"
			if k.Variant == "v2" {
				want = "2"
			}
			if k.Constraints["lse_base"] != want {
				t.Errorf("%s %s: constraint lse_base %v, want %s", k.Target, k.Symbol, k.Constraints["lse_base"], want)
			}
		}
		if h := string(artifact(out, vs[len(vs)-1].Name+".h")); strings.Contains(h, "base-2") != (vs[len(vs)-1].LSEBase == ir.LSEBase2) {
			t.Errorf("header of %s does not state its lse base:\n%s", vs[len(vs)-1].Name, h[:400])
		}
	}
}
