package cli

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// needSASS skips without clang-19, ptxas and cuobjdump, except in CI.
func needSASS(t *testing.T) {
	t.Helper()
	_, err := cuda.ClangCUDA()
	if err == nil {
		_, err = sass.FindTools()
	}
	needtool.Check(t, err)
}

// f32Prefill meets every machine-code target today: f32 needs no tensor
// cores and its prefill keeps no arrays in local memory.
const f32Prefill = `variant small_f32 {
  heads qo = 4, kv = 2
  head_dim 64
  dtype f32
  cache paged(page_size = 16)
  kernels prefill
}
`

func TestSASSCommand(t *testing.T) {
	bad := unsupported(t)
	needSASS(t)
	o, _ := mustRun(t, "sass", llama3, bad, "--arch", "sm_90")
	if !strings.Contains(o, "skip mla_rope: ") || !strings.Contains(o, "sass llama3_8b dtype=f16 ptxas=") {
		t.Errorf("attnc sass printed:\n%s", o)
	}
	// One row per device kernel, with the manifest's launch.
	for _, k := range []string{"prefill", "decode", "decode_split", "decode_merge", "merge_state"} {
		re := regexp.MustCompile(`(?m)^\s*llama3_8b_` + k + `_work sm_90\s+\d+\s+\d+\s+\d+/\d+\s+\d+\+\d+\s+128\s+\d+ `)
		if !re.MatchString(o) {
			t.Errorf("no sm_90 row for llama3_8b_%s_work:\n%s", k, o)
		}
	}
	if strings.Contains(o, "sm_80") || strings.Contains(o, "target not met") {
		t.Errorf("--arch sm_90 without --check printed sm_80 rows or target checks:\n%s", o)
	}

	// --check: exit 1 exactly when a target is not met.
	o, e, code := runCLI(t, "sass", llama3, "--check")
	missed := strings.Count(o, "target not met: ")
	if (missed > 0) != (code == 1) || code > 1 {
		t.Errorf("sass --check: exit %d with %d targets not met\n%s%s", code, missed, o, e)
	}
	if missed == 0 && !strings.Contains(o, "all targets met") {
		t.Errorf("sass --check printed neither misses nor success:\n%s", o)
	}
	o, e, code = runCLI(t, "sass", writeSpec(t, "small_f32.attn", f32Prefill), "--check")
	if code != 0 || !strings.Contains(o, "all targets met") || !strings.Contains(o, "small_f32_prefill_work sm_80") {
		t.Errorf("sass --check of an f32 prefill: exit %d\n%s%s", code, o, e)
	}
}

// TestSASSUserPasses runs sass with a user pass that adds a kernel (a
// second merge_state work kernel): the kernel is assembled with the pass
// and absent without it, as in what build writes with the pass.
func TestSASSUserPasses(t *testing.T) {
	needSASS(t)
	spec := writeSpec(t, "small_f32.attn", strings.Replace(f32Prefill, "kernels prefill", "kernels prefill, merge_state", 1))
	add := attnc.Insertion{Before: "inline-defs", Pass: passes.Pass{Name: "add-kernel", Desc: "add a copy of the merge_state work kernel",
		Run: func(m *ir.Module) (*ir.Module, error) {
			out := *m
			out.Kernels = slices.Clone(m.Kernels)
			for _, k := range m.Kernels {
				if k.Role == ir.RoleMergeState && !k.Entry {
					c := *k
					c.Name += "_copy"
					out.Kernels = append(out.Kernels, &c)
				}
			}
			return &out, nil
		}}}
	args := []string{"sass", spec, "--arch", "sm_80"}
	if o, _ := mustRun(t, args...); !strings.Contains(o, "small_f32_merge_state_work sm_80") || strings.Contains(o, "_copy") {
		t.Fatalf("attnc sass without the pass: no merge_state row, or a copy:\n%s", o)
	}
	var o, e bytes.Buffer
	if code := Run(args, &o, &e, WithPasses(add)); code != 0 || !strings.Contains(o.String(), "small_f32_merge_state_work_copy sm_80") || !strings.Contains(o.String(), "small_f32_prefill_work sm_80") {
		t.Errorf("attnc sass with a pass that adds a kernel (exit %d): want its row beside the prefill row\n%s%s", code, o.String(), e.String())
	}
}

func TestSASSCommandErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sass"}, "no spec file"},
		{[]string{"sass", llama3, "--arch", "sm_75"}, `unknown --arch "sm_75"`},
		{[]string{"sass", llama3, "--arch", ","}, "--arch is empty"},
		{[]string{"sass", "no/such/file.attn"}, "no/such/file.attn"},
	} {
		_, e, code := runCLI(t, c.args...)
		if code != 1 || !strings.Contains(e, c.want) {
			t.Errorf("attnc %s: exit %d, stderr %q, want 1 and %q", strings.Join(c.args, " "), code, e, c.want)
		}
	}
}
