package conformance

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/registry"
	cputarget "github.com/attnc/attnc/targets/cpu"
)

// TestSmallStacks calls every example's prefill, decode, split-KV decode
// and merge_state on a thread with a 64 KiB stack, and again on one with
// exactly the stack the manifest and header state for the entry (rounded up
// to a page), and checks the outputs against the reference. Kernels that
// keep tiles on the caller's stack fault here (deepseek_v3_mla's prefill
// used to need more than 512 KiB). The examples of examplesLong (the
// costliest to compile) run with -examples.all (CI's long pass), as in
// TestExamples: the default run compiles the same examples for both tests
// (the object cache compiles each once).
func TestSmallStacks(t *testing.T) {
	t.Parallel()
	needTools(t)
	files, err := filepath.Glob("../examples/*.attn")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		vs, err := frontend.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if lower.Unsupported(v) != nil {
				continue
			}
			t.Run(v.Name, func(t *testing.T) {
				if !*examplesAll && slices.Contains(examplesLong, v.Name) {
					t.Skip("with -examples.all (CI's long pass, .ci/run), as in TestExamples")
				}
				t.Parallel()
				s, err := buildHostLevel(v, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				defer s.Lib.Close()
				ps := v.PageSize
				split := reference.CaseSpec{Name: "split-KV decode", QLens: []int{1}, KVLens: []int{600}, NaNFill: true}
				sel, err := cputarget.Target{}.Select(v, s.Final, registry.Shape{QLens: split.QLens, KVLens: split.KVLens, Threads: 64, DecodeLayout: true})
				if err != nil || sel.Splits < 2 {
					t.Fatalf("the split case does not split KV at 64 threads: %+v, %v", sel, err)
				}
				runs := []struct {
					role    ir.Role
					spec    reference.CaseSpec
					threads int
				}{
					{ir.RolePrefill, reference.CaseSpec{Name: "prefill", QLens: []int{5, 17}, KVLens: []int{5 + ps, 40 + ps}, NaNFill: true}, 2},
					{ir.RoleDecode, reference.CaseSpec{Name: "decode", QLens: []int{1, 1}, KVLens: []int{70, 3}, NaNFill: true}, 1},
					{ir.RoleDecode, split, 64},
				}
				for _, stack := range []string{"64 KiB", "stated"} {
					for _, r := range runs {
						if _, ok := s.Entries[r.role]; !ok {
							continue
						}
						s.Stack = stackFor(s, r.role, stack)
						res := s.RunAttention(r.role, r.spec, 5, r.threads)
						if !res.Pass {
							t.Errorf("%s stack (%d bytes): %s", stack, s.Stack, res)
						}
					}
					if _, ok := s.Entries[ir.RoleMergeState]; ok {
						s.Stack = stackFor(s, ir.RoleMergeState, stack)
						if res := s.RunMergeState(3, 5, 2); !res.Pass {
							t.Errorf("%s stack (%d bytes): %s", stack, s.Stack, res)
						}
					}
				}
			})
		}
	}
}

// stackFor is the stack to run role's entry on: 64 KiB, or the bytes the
// manifest states rounded up to a 4 KiB page (at least 16 KiB, the
// smallest pthread stack).
func stackFor(s *Suite, role ir.Role, which string) int {
	if which == "64 KiB" {
		return 64 << 10
	}
	n := int(s.StackBytes(s.Entries[role].Symbol))
	return max(16<<10, (n+4095)&^4095)
}
