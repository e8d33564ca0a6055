package driver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/needtool"
	cudatarget "github.com/attnc/attnc/targets/cuda"
)

// TestRaggedCUDAToPTX compiles prefill_ragged's CUDA (an f16 variant over
// an e4m3 cache, whose ragged rows are f16, and an f32 one with RoPE) to
// PTX for sm_80 and sm_90: its work kernel is there, on the tensor cores
// for f16 (mma) and with warp shuffles; and the nvcc branch (host
// launchers) compiles with -Werror.
func TestRaggedCUDAToPTX(t *testing.T) {
	clang, err := cuda.ClangCUDA()
	needtool.Check(t, err)
	src := `variant rg_f16 {
	  heads qo = 8, kv = 2
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 16, kv_dtype = e4m3)
	  kernels prefill, merge_state, prefill_ragged
	}
	variant rg_f32 {
	  heads qo = 4, kv = 4
	  head_dim 64
	  dtype f32
	  cache paged(page_size = 4)
	  rope inline(theta = 10000)
	  kernels prefill_ragged
	}`
	vs, err := frontend.Parse("ragged.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Build(vs, Options{Targets: []string{"cuda"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cuda_runtime.h"), []byte(cuda.NVCCStub), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		cu := filepath.Join(dir, v.Name+".cu")
		if err := os.WriteFile(cu, artifact(out, v.Name+".cu"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, arch := range []string{"sm_80", "sm_90"} {
			ptx := filepath.Join(dir, v.Name+"."+arch+".ptx")
			if err := cudatarget.CompilePTX(cu, ptx, arch); err != nil {
				t.Fatalf("%s %s: %v", v.Name, arch, err)
			}
			text, _ := os.ReadFile(ptx)
			if !strings.Contains(string(text), ".entry "+v.Name+"_prefill_ragged_work") {
				t.Errorf("%s %s: no kernel %s_prefill_ragged_work in the PTX", v.Name, arch, v.Name)
			}
			if !strings.Contains(string(text), "shfl.sync.bfly") {
				t.Errorf("%s %s: no warp shuffle", v.Name, arch)
			}
			if half := v.DType.Info().TensorCore; half != strings.Contains(string(text), "mma.sync.aligned.m16n8k16") {
				t.Errorf("%s %s: tensor-core mma present = %v", v.Name, arch, !half)
			}
		}
		cmd := exec.Command(clang, "-x", "cuda", "--cuda-host-only", "-c", "--cuda-gpu-arch=sm_90", "-nocudainc", "-nocudalib", "-Werror",
			"-Xclang", "-target-feature", "-Xclang", "+ptx78", "-D__NVCC__", "-I"+dir, "-O1", "-o", filepath.Join(dir, v.Name+".o"), cu)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s host side: %v\n%s", v.Name, err, msg)
		}
	}
}
