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
	"github.com/attnc/attnc/ir"
	cudatarget "github.com/attnc/attnc/targets/cuda"
)

// TestQKVAppendCUDAToPTX compiles qkv_append's CUDA (Qwen3's shape with
// qk_norm and rope at_append over an f16 cache; bf16 over an e4m3 cache
// with per-head scales, llama3 RoPE, interleaved, partial; f16 with the
// angles from rope_factors; f32 from a table) to PTX for sm_80 and sm_90:
// its work kernel is there, with the norm's reduction and the rotation's
// cos and sin as the polynomial every target shares (no sin.approx or
// cos.approx; its turn-to-radians constant 2π/2^24, 0f34C90FDB, appears
// except with a table, which is loaded); and the nvcc branch (host
// launchers) compiles with -Werror.
func TestQKVAppendCUDAToPTX(t *testing.T) {
	clang, err := cuda.ClangCUDA()
	needtool.Check(t, err)
	src := `variant qa_qwen3 {
	  heads qo = 32, kv = 8
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 16)
	  qk_norm rms(eps = 1e-6)
	  rope at_append(theta = 1000000)
	  kernels prefill, decode, qkv_append
	}
	variant qa_bf16_e4m3 {
	  heads qo = 4, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 4, layout = NHD, kv_dtype = e4m3, kv_scale = per_head)
	  qk_norm rms(offset = 1)
	  rope at_append(style = llama3, theta = 500000, pairs = interleaved, rotary_dim = 32)
	  kernels qkv_append
	}
	variant qa_factors {
	  heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16)
	  qk_norm rms(eps = 1e-6)
	  rope at_append(style = factors, theta = 10000, attn_factor = 1.19)
	  kernels qkv_append, decode
	}
	variant qa_table {
	  heads qo = 4, kv = 4
	  head_dim 32
	  dtype f32
	  cache paged(page_size = 8, layout = NHD)
	  qk_norm rms(eps = 1e-6)
	  rope at_append(table, rotary_dim = 16, pairs = interleaved)
	  kernels qkv_append, prefill
	}`
	vs, err := frontend.Parse("qkv.attn", []byte(src))
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
			entry := ".entry " + v.Name + "_qkv_append_work"
			i := strings.Index(string(text), entry)
			if i < 0 {
				t.Fatalf("%s %s: no kernel %s_qkv_append_work in the PTX", v.Name, arch, v.Name)
			}
			body := string(text[i:])
			if j := strings.Index(body[len(entry):], ".entry "); j >= 0 {
				body = body[:len(entry)+j]
			}
			fromTable := v.Rope.Style == ir.RopeTable
			for _, op := range []string{"sqrt.rn.f32", "sin.approx", "cos.approx", "0f34C90FDB"} {
				want := op == "sqrt.rn.f32" || op == "0f34C90FDB" && !fromTable
				if got := strings.Contains(body, op); got != want {
					t.Errorf("%s %s: %s in the qkv_append kernel: %v, want %v", v.Name, arch, op, got, want)
				}
			}
		}
		cmd := exec.Command(clang, "-x", "cuda", "--cuda-host-only", "-c", "--cuda-gpu-arch=sm_90", "-nocudainc", "-nocudalib", "-Werror",
			"-Xclang", "-target-feature", "-Xclang", "+ptx78", "-D__NVCC__", "-I"+dir, "-O1", "-o", filepath.Join(dir, v.Name+".o"), cu)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s host side: %v\n%s", v.Name, err, msg)
		}
	}
}
