package conformance

import (
	"flag"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
)

const aarch64 = "aarch64-unknown-linux-gnu"

var aarch64All = flag.Bool("aarch64.all", false, "run every matrix variant under qemu-aarch64, not only aarch64Short")

// aarch64Short are the variants of matrixSpecs that TestAArch64Matrix runs
// under qemu by default (with -aarch64.all, CI's long pass, every
// variant): MLA, an e4m3 cache with f16 GQA (head_dim 128, NHD; the plain
// f16 ps16_gqa4 of the same shape runs in the long pass), and RoPE from
// factors (f16, a tree, GQA). A block table with the page kernels (f32,
// ps2_block_table_f32; f32 runs under qemu by default in
// TestAArch64Ragged's ps16_rope_f32, the page kernels in
// TestPageKernelsAArch64), the i8 cache with RoPE (ps32_i8_rope) and RoPE
// from a table with a window (ps8_rope_table_window_f32) run under qemu in
// the long pass.
var aarch64Short = []string{"ps16_mla", "ps16_e4m3_gqa4", "ps8_rope_factors_f16_tree"}

// TestAArch64Matrix cross-compiles the matrix variants for aarch64 (opt and
// llc -mtriple=aarch64-linux-gnu, aarch64-linux-gnu-gcc) and runs the same
// conformance matrix as TestKernelMatrix on them under qemu-aarch64:
// prefill, decode with split KV, merge_state, page kernels, bad inputs.
// By default it runs aarch64Short, which keeps the default go test ./...
// within its time budget; -aarch64.all (CI's second pass, .ci/run) runs
// the whole matrix.
func TestAArch64Matrix(t *testing.T) {
	t.Parallel()
	_, err := cpurt.ToolchainFor(aarch64)
	needtool.Check(t, err)
	var mu sync.Mutex
	oErr, lseErr := map[string]float64{}, map[string]float64{}
	cases, variants := 0, 0
	start := time.Now()
	t.Run("variants", func(t *testing.T) {
		for _, src := range matrixSpecs {
			v := spec(t, src)
			if !*aarch64All && !slices.Contains(aarch64Short, v.Name) {
				continue
			}
			t.Run(v.Name, func(t *testing.T) {
				t.Parallel()
				s := buildAArch64(t, v)
				rs := s.RunAll([]int{1, 3}, 7)
				mu.Lock()
				defer mu.Unlock()
				variants++
				for _, r := range rs {
					if !r.Pass {
						t.Errorf("%s", r)
					}
					dt := dtypeKey(v)
					oErr[dt], lseErr[dt] = math.Max(oErr[dt], r.MaxErr), math.Max(lseErr[dt], r.LSEErr)
					cases++
				}
			})
		}
	})
	t.Logf("aarch64 under qemu: %d variants, %d kernel runs in %v; max errors: o %v, lse %v",
		variants, cases, time.Since(start).Round(time.Millisecond), oErr, lseErr)
}

// buildAArch64 builds v for aarch64 and loads it in a runner under the
// emulator (on an aarch64 machine, in this process), closed when t ends; a
// foreign-triple suite must run through its runner's memory.
func buildAArch64(t *testing.T, v *ir.Variant) *Suite {
	t.Helper()
	tc, err := cpurt.ToolchainFor(aarch64)
	needtool.Check(t, err)
	s, err := BuildWith(v, t.TempDir(), Options{Triple: aarch64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	if s.Dev == nil && tc.Foreign() {
		t.Fatal("a foreign-triple suite must run through its runner's memory")
	}
	return s
}
