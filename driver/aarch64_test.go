package driver

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVectorizedAArch64 checks that the IR built for aarch64 is NEON-ready:
// opt -O3 -mtriple=aarch64-linux-gnu vectorizes the same inner loops as on
// x86-64 (4 x f32, NEON's width) and llc emits NEON multiply-adds.
func TestVectorizedAArch64(t *testing.T) {
	needTools(t)
	const triple = "aarch64-linux-gnu"
	dir := t.TempDir()
	for _, ex := range vectorizedExamples() {
		vs, err := ParseSpecs([]string{filepath.Join("..", "examples", ex+".attn")})
		if err != nil {
			t.Fatal(err)
		}
		out, err := Build(vs, Options{Triple: "aarch64-unknown-linux-gnu"})
		if err != nil {
			t.Fatal(err)
		}
		ll := filepath.Join(dir, ex+".ll")
		if err := os.WriteFile(ll, artifact(out, ex+".ll"), 0o644); err != nil {
			t.Fatal(err)
		}
		optLL, s := filepath.Join(dir, ex+".opt.ll"), filepath.Join(dir, ex+".s")
		cmd := exec.Command("opt", "-O3", "-mtriple="+triple, "-pass-remarks=loop-vectorize", "-S", ll, "-o", optLL)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("opt: %v\n%s", err, stderr.String())
		}
		n := len(regexp.MustCompile(`remark: .*vectorized loop`).FindAllString(stderr.String(), -1))
		if n < 5 {
			t.Errorf("%s: %d loops vectorized for aarch64, want >= 5\n%s", ex, n, stderr.String())
		}
		opt, _ := os.ReadFile(optLL)
		if !strings.Contains(string(opt), "fmul reassoc contract <4 x float>") {
			t.Errorf("%s: no <4 x float> multiply in the optimized aarch64 kernels", ex)
		}
		if msg, err := exec.Command("llc", "-O3", "-mtriple="+triple, "-relocation-model=pic", optLL, "-o", s).CombinedOutput(); err != nil {
			t.Fatalf("llc: %v\n%s", err, msg)
		}
		asm, _ := os.ReadFile(s)
		fmla := len(regexp.MustCompile(`(?m)^\s+fmla\s+v\d+\.4s`).FindAll(asm, -1))
		if fmla == 0 {
			t.Errorf("%s: no NEON fmla v.4s in the aarch64 assembly", ex)
		}
		t.Logf("%s: %d loops vectorized, %d NEON fmla.4s", ex, n, fmla)
	}
}
