package driver

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/internal/needtool"
)

// issue11Targets turns on the assertions of issue 11 ("CUDA kernels built
// the way FlashAttention-2 and FlashInfer are"): every example's kernels
// assemble with zero spills and a zero stack frame, every f16/bf16 prefill
// has LDGSTS, LDSM and HMMA and no LDL/STL, decode has LDGSTS or 128-bit
// LDG, and every kernel keeps to the register budget and occupancy its
// manifest launch states (SASSTargets). With false, TestSASS only logs
// what is not met; ATTNC_SASS_STRICT=1 turns them on for one run.
const issue11Targets = true

func sassStrict() bool { return issue11Targets || os.Getenv("ATTNC_SASS_STRICT") == "1" }

// TestSASS assembles every in-scope example's CUDA kernels with NVIDIA's
// ptxas for sm_80 and sm_90, reads the SASS back with cuobjdump and logs
// the table (registers, stack frame, spills, shared memory, occupancy,
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
	archs := []string{"sm_80", "sm_90"}
	var all []SASSRow
	var mu sync.Mutex
	// The examples assemble in parallel; the group returns when all have.
	t.Run("examples", func(t *testing.T) {
		for _, ex := range inScope {
			t.Run(ex, func(t *testing.T) {
				t.Parallel()
				out := buildTargets(t, ex, "cuda")
				dir := t.TempDir()
				rows, err := SASS(out, archs, tools, dir)
				if err != nil {
					t.Fatal(err)
				}
				var tab bytes.Buffer
				if err := WriteSASSTable(&tab, rows); err != nil {
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
	unmet := CheckSASS(all)
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

// The targets apply to the kernels issue 11 names, and each one can fail.
func TestSASSTargets(t *testing.T) {
	good := func(role, dtype string) SASSRow {
		r := SASSRow{Role: role, DType: dtype, Kernel: sass.Kernel{Name: "k", Arch: "sm_90", Registers: 64,
			Opcodes: map[string]int{"LDGSTS.E.BYPASS.128": 4, "LDSM.16.M88.4": 8, "HMMA.16816.F32": 16}},
			MaxRegisters: 128, MinBlocks: 2, Occupancy: sass.Occupancy{BlocksPerSM: 4}}
		return r
	}
	for _, r := range []SASSRow{good("prefill", "f16"), good("prefill", "bf16"), good("decode", "f16"),
		good("merge_state", "f32")} {
		if u := CheckSASS([]SASSRow{r}); len(u) != 0 {
			t.Errorf("%s %s: %v", r.Role, r.DType, u)
		}
	}
	cases := []struct {
		name   string
		mutate func(*SASSRow)
		want   string
	}{
		{"spill", func(r *SASSRow) { r.SpillStores = 8 }, "zero spills"},
		{"stack", func(r *SASSRow) { r.StackFrame = 64 }, "zero stack frame"},
		{"no cp.async", func(r *SASSRow) { delete(r.Opcodes, "LDGSTS.E.BYPASS.128") }, "has LDGSTS"},
		{"no ldmatrix", func(r *SASSRow) { delete(r.Opcodes, "LDSM.16.M88.4") }, "has LDSM"},
		{"no mma", func(r *SASSRow) { delete(r.Opcodes, "HMMA.16816.F32") }, "has HMMA"},
		{"local loads", func(r *SASSRow) { r.Opcodes["LDL.64"] = 1 }, "no LDL/STL"},
		{"local stores", func(r *SASSRow) { r.Opcodes["STL.U8"] = 1 }, "no LDL/STL"},
		{"over the register bound", func(r *SASSRow) { r.MaxRegisters = 56 }, "launch bound"},
		{"under the stated occupancy", func(r *SASSRow) { r.MinBlocks = 9; r.Occupancy.BlocksPerSM = 8 }, "occupancy at least"},
	}
	for _, c := range cases {
		r := good("prefill", "bf16")
		c.mutate(&r)
		u := CheckSASS([]SASSRow{r})
		if len(u) != 1 || !strings.Contains(u[0], c.want) {
			t.Errorf("%s: CheckSASS = %v, want one failure %q", c.name, u, c.want)
		}
	}
	// f32 prefill needs no tensor-core path; decode needs wide loads.
	r := good("prefill", "f32")
	r.Opcodes = map[string]int{"FFMA": 1}
	if u := CheckSASS([]SASSRow{r}); len(u) != 0 {
		t.Errorf("f32 prefill: %v", u)
	}
	d := good("decode", "f16")
	d.Opcodes = map[string]int{"LDG.E": 8}
	if u := CheckSASS([]SASSRow{d}); len(u) != 1 || !strings.Contains(u[0], "LDGSTS or LDG.128") {
		t.Errorf("decode with 32-bit loads: %v", u)
	}
	d.Opcodes = map[string]int{"LDG.E.128.CONSTANT": 8}
	if u := CheckSASS([]SASSRow{d}); len(u) != 0 {
		t.Errorf("decode with 128-bit loads: %v", u)
	}
}
