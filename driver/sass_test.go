package driver

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/internal/needtool"
	cudatarget "github.com/attnc/attnc/targets/cuda"
)

// issue11Targets turns on the assertions of issue 11 ("CUDA kernels built
// the way FlashAttention-2 and FlashInfer are"): every example's kernels
// assemble with zero spills and a zero stack frame, every f16/bf16 prefill
// has LDGSTS, LDSM and HMMA and no LDL/STL, decode has LDGSTS or 128-bit
// LDG, and every kernel keeps to the register budget and occupancy its
// manifest launch states (cudatarget.SASSTargets). With false, TestSASS only logs
// what is not met; ATTNC_SASS_STRICT=1 turns them on for one run.
const issue11Targets = true

// sassSM90Only are the examples of cudaShort whose kernels TestSASS
// assembles for sm_90 only by default (with -examples.all, CI's long
// pass, for sm_80 too): deepseek_v3_mla, whose 576-wide MLA rows keep
// ptxas busy about half a minute per architecture (an eighth of the
// package's CPU time); llama3_8b and mha_softcap hold sm_80 to the same
// checks, and TestCUDAToPTX still compiles its PTX for sm_80.
var sassSM90Only = []string{"deepseek_v3_mla"}

func sassStrict() bool { return issue11Targets || os.Getenv("ATTNC_SASS_STRICT") == "1" }

// TestSASS assembles the CUDA kernels of cudaExamples (every example with
// -examples.all) with NVIDIA's ptxas for sm_80 and sm_90 (by default
// cudaOneArch at one of them, sassSM90Only at sm_90), reads the SASS back
// with cuobjdump and logs the table (registers, stack frame, spills, shared memory, occupancy,
// opcode families). It asserts that every kernel assembles, that the
// manifest's launch fits on an SM, and that what the PTX asks for shows up
// in the SASS (mma -> HMMA, cp.async -> LDGSTS, ldmatrix -> LDSM); with
// issue11Targets, issue 11's targets as well.
func TestSASS(t *testing.T) {
	_, err := cuda.ClangCUDA()
	needtool.Check(t, err)
	tools, err := sass.FindTools()
	needtool.Check(t, err)
	t.Logf("ptxas %s (CUDA %s), cuobjdump %s", tools.PTXAS, tools.Release, tools.Cuobjdump)
	var all []cudatarget.SASSRow
	var mu sync.Mutex
	// The examples assemble in parallel; the group returns when all have.
	t.Run("examples", func(t *testing.T) {
		for _, ex := range cudaExamples() {
			t.Run(ex, func(t *testing.T) {
				t.Parallel()
				out := buildTargets(t, ex, "cuda")
				dir := t.TempDir()
				v := out.Variants[0]
				archs := cudaArchs(ex)
				if !*examplesAll && slices.Contains(sassSM90Only, ex) {
					archs = []string{"sm_90"}
				}
				rows, err := cudatarget.SASS(v, artifact(out, v.Name+".cu"), out.Manifest.Kernels, archs, tools, dir)
				if err != nil {
					t.Fatal(err)
				}
				var tab bytes.Buffer
				if err := cudatarget.WriteSASSTable(&tab, rows); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s:\n%s", ex, tab.String())
				for _, arch := range archs {
					ptx, err := os.ReadFile(filepath.Join(dir, ex+"."+arch+".ptx"))
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range []struct{ ptx, family string }{
						{"mma.sync.aligned", "HMMA"}, {"cp.async.", "LDGSTS"}, {"ldmatrix.sync.aligned", "LDSM"},
					} {
						inPTX := bytes.Contains(ptx, []byte(c.ptx))
						inSASS := 0
						for _, r := range rows {
							if r.Arch == arch {
								inSASS += r.Count(c.family)
							}
						}
						if inPTX != (inSASS > 0) {
							t.Errorf("%s %s: PTX has %s: %v, but the SASS has %d %s", ex, arch, c.ptx, inPTX, inSASS, c.family)
						}
					}
				}
				for _, r := range rows {
					if r.Registers <= 0 || r.Instructions == 0 || r.Occupancy.BlocksPerSM < 1 {
						t.Errorf("%s %s: implausible: %d registers, %d instructions, %d blocks per SM",
							r.Name, r.Arch, r.Registers, r.Instructions, r.Occupancy.BlocksPerSM)
					}
				}
				mu.Lock()
				all = append(all, rows...)
				mu.Unlock()
			})
		}
	})
	unmet := cudatarget.CheckSASS(all)
	if sassStrict() {
		for _, u := range unmet {
			t.Errorf("issue 11 target not met: %s", u)
		}
		return
	}
	if len(unmet) > 0 {
		t.Logf("issue 11 targets not met yet (%d; asserted once issue11Targets is true):\n  %s",
			len(unmet), strings.Join(unmet, "\n  "))
	}
}
