package conformance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// faultShim is the allocation interposer, linked into a kernel library
// with -Wl,--wrap=FN and -Wl,--wrap=free: the library's own calls of the
// allocation function FN (malloc in the CPU kernels, aligned_alloc in the
// CUDA emulator's scratch allocation) and of free come here; libc's own
// allocations and the Go runtime's are not wrapped. attnc_fault_arm(n)
// starts counting afresh and makes the n-th allocation (counted from 1; 0:
// none) return NULL; attnc_fault_calls is the allocations since,
// attnc_fault_live those that succeeded and are not freed yet.
func faultShim(fn, params, args string) string {
	return fmt.Sprintf(`#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
void *__real_%[1]s(%[2]s);
void __real_free(void *);
static long calls, fail_at, live;
void *__wrap_%[1]s(%[2]s) {
	long k = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
	if (k == __atomic_load_n(&fail_at, __ATOMIC_SEQ_CST)) return NULL;
	void *p = __real_%[1]s(%[3]s);
	if (p) __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
	return p;
}
void __wrap_free(void *p) {
	if (p) __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
	__real_free(p);
}
int32_t attnc_fault_arm(int64_t n) {
	__atomic_store_n(&calls, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&live, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&fail_at, (long)n, __ATOMIC_SEQ_CST);
	return 0;
}
int32_t attnc_fault_calls(void) { return (int32_t)__atomic_load_n(&calls, __ATOMIC_SEQ_CST); }
int32_t attnc_fault_live(void) { return (int32_t)__atomic_load_n(&live, __ATOMIC_SEQ_CST); }
#ifdef __cplusplus
}
#endif
`, fn, params, args)
}

// faultLink writes the interposer of fn into dir and returns the link
// arguments that wrap fn and free with it.
func faultLink(t *testing.T, dir, fn, params, args string) []string {
	t.Helper()
	shim := filepath.Join(dir, "fault_shim.c")
	if err := os.WriteFile(shim, []byte(faultShim(fn, params, args)), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"-fPIC", shim, "-Wl,--wrap=" + fn, "-Wl,--wrap=free"}
}

// otherAllocators are the C allocation functions the interposer does not
// wrap: the generated code must call none of them.
var otherAllocators = regexp.MustCompile(`@(calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|mmap|mmap64|sbrk|brk|strdup|strndup)\(`)

// nomemSpecs are the variants the allocation-failure matrix runs: GQA over
// an f16 cache with the page kernels, an 8-bit cache with append, and MLA;
// every one has prefill, decode (direct and split-KV + merge) and
// merge_state. The default run takes nomemShort.
var nomemSpecs = []string{
	`variant nomem_gqa_f16 { heads qo = 8, kv = 2
	  head_dim 128
	  dtype f16
	  cache paged(page_size = 16, layout = NHD)
	  mask causal
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant nomem_e4m3 { heads qo = 8, kv = 2
	  head_dim 64
	  dtype bf16
	  cache paged(page_size = 8, kv_dtype = e4m3, kv_scale = per_head)
	  mask causal
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant nomem_mla { mla(heads = 16, kv_lora_rank = 64, rope_dim = 32)
	  dtype f16
	  cache paged(page_size = 16)
	  mask causal
	  scale 0.1 }`,
}

// nomemShort are the variants of nomemSpecs that TestAllocationFailure
// runs by default (-levels.all, CI's long pass, runs every one, at every
// level): the f16 GQA with the page kernels and the 8-bit cache with
// append; MLA's calls (prefill, split-KV decode and merge) allocate the
// same way on a wider latent.
var nomemShort = []string{"nomem_gqa_f16", "nomem_e4m3"}

// TestAllocationFailure makes every allocation of every entry call fail in
// turn, at every CPU level this machine runs: for each call of a few
// representative cases (prefill at 1 and 3 threads, decode without and with
// the split-KV chunks and merge, prefill handing over to split decode,
// merge_state, append, copy_page) it counts the mallocs of the call when
// none fails (the call must then match the reference and free everything),
// then, for n = 1..count, runs the same call with the n-th malloc failing:
// the entry must return NO_MEMORY, allocate nothing after the failure, free
// everything, and leave every buffer it was given byte for byte as it was;
// a clean run after the failures must match the reference again.
func TestAllocationFailure(t *testing.T) {
	t.Parallel()
	needTools(t)
	for _, src := range nomemSpecs {
		v := spec(t, src)
		if !*levelsAll && !slices.Contains(nomemShort, v.Name) {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			o := Options{Link: faultLink(t, dir, "malloc", "size_t n", "n")}
			if !*levelsAll {
				table, err := hostLevelTable() // this machine's level's clone only
				if err != nil {
					t.Fatal(err)
				}
				o.Passes = table
			}
			s, err := BuildWith(v, dir, o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Lib.Close()
			ll, err := os.ReadFile(filepath.Join(dir, v.Name+".ll"))
			if err != nil {
				t.Fatal(err)
			}
			if m := otherAllocators.Find(ll); m != nil {
				t.Fatalf("the kernels call %s, which the interposer does not wrap", m)
			}
			if !bytes.Contains(ll, []byte("@malloc(")) {
				t.Fatal("the kernels call no malloc: the interposer would see nothing")
			}
			suites := []*Suite{s}
			// The default run takes the widest level this CPU runs;
			// -levels.all (CI's long pass) every level.
			for _, level := range clonedBelow(t, s) {
				if !*levelsAll {
					break
				}
				ls, err := s.AtLevel(level)
				if err != nil {
					t.Fatal(err)
				}
				defer ls.Lib.Close()
				suites = append(suites, ls)
			}
			for _, ls := range suites {
				t.Run(ls.Level, func(t *testing.T) {
					for _, c := range nomemCalls(ls) {
						runFaults(t, ls, c)
					}
				})
			}
		})
	}
}

// nomemCall is a run of one or more entry calls whose results must pass
// when no allocation fails; its first call must make at least minMallocs
// mallocs (the proof that it takes the path it names).
type nomemCall struct {
	name       string
	run        func() []Result
	minMallocs int
}

// nomemCalls are the calls the matrix runs on suite s.
func nomemCalls(s *Suite) []nomemCall {
	v := s.V
	ps := v.PageSize
	attention := func(role ir.Role, spec reference.CaseSpec, threads int) func() []Result {
		return func() []Result { return []Result{s.RunAttention(role, spec, 11, threads)} }
	}
	prefill := reference.CaseSpec{Name: "ragged prefill", QLens: []int{5, 0, 17, 1}, KVLens: []int{5 + ps, 0, 17 + 2*ps + 3, 9}, ExtraPages: 1, NaNFill: true}
	// Decode over batch x kv_heads items: the direct path when there are
	// at least as many items as threads, chunks and the merge when a
	// single sequence gets many more threads than items.
	direct := reference.CaseSpec{Name: "decode batch", QLens: []int{1, 1, 1}, KVLens: []int{1, 2*ps + 1, 200}, ExtraPages: 1, NaNFill: true}
	split := reference.CaseSpec{Name: "decode long single", QLens: []int{1}, KVLens: []int{300 + ps}, NaNFill: true}
	calls := []nomemCall{
		{name: "prefill threads=1", run: attention(ir.RolePrefill, prefill, 1)},
		{name: "prefill threads=3", run: attention(ir.RolePrefill, prefill, 3)},
		{name: "decode direct threads=1", run: attention(ir.RoleDecode, direct, 1)},
		{name: "decode direct threads=3", run: attention(ir.RoleDecode, direct, 3)},
		// Two partial buffers, then the chunks and the merge.
		{name: "decode split threads=8", run: attention(ir.RoleDecode, split, 8), minMallocs: 3},
		// Every q_len 1: prefill hands over to decode (here split).
		{name: "prefill handing over to split decode threads=8", run: attention(ir.RolePrefill, split, 8), minMallocs: 3},
		{name: "merge_state threads=3", run: func() []Result { return []Result{s.RunMergeState(7, 11, 3)} }},
	}
	if _, ok := s.Entries[ir.RoleAppend]; ok {
		calls = append(calls, nomemCall{name: "page kernels threads=3", run: func() []Result {
			if err := s.SetThreads(3); err != nil {
				return []Result{{Variant: v.Name, Case: "set threads", Note: err.Error()}}
			}
			return s.RunPageKernels(11)
		}})
	}
	return calls
}

// faultArm arms the interposer; faultCount reads one of its counters.
func faultArm(s *Suite, n int) error {
	_, err := s.Lib.Call("attnc_fault_arm", int64(n))
	return err
}

func faultCount(s *Suite, sym string) int {
	n, err := s.Lib.Call(sym)
	if err != nil {
		return -1
	}
	return int(n)
}

// runFaults runs c once with no failure, counting each entry call's
// mallocs, then once for every (call, n) with that call's n-th malloc
// failing.
func runFaults(t *testing.T, s *Suite, c nomemCall) {
	t.Helper()
	type callCount struct{ mallocs, live int }
	var counts []callCount
	s.callHook = func(cb *caseBuffers, call func() (int32, error)) (int32, error) {
		if err := faultArm(s, 0); err != nil {
			return 0, err
		}
		st, err := call()
		counts = append(counts, callCount{faultCount(s, "attnc_fault_calls"), faultCount(s, "attnc_fault_live")})
		return st, err
	}
	defer func() { s.callHook = nil }()
	for _, r := range c.run() {
		if !r.Pass {
			t.Errorf("%s, no allocation failing: %s", c.name, r)
		}
	}
	for i, n := range counts {
		if n.live != 0 {
			t.Errorf("%s: call %d leaves %d of its %d allocations unfreed", c.name, i, n.live, n.mallocs)
		}
	}
	if len(counts) == 0 || counts[0].mallocs < c.minMallocs {
		t.Fatalf("%s: mallocs per entry call %v, want at least %d in the first", c.name, counts, c.minMallocs)
	}
	t.Logf("%s: mallocs per entry call %v", c.name, counts)
	for j, cc := range counts {
		for n := 1; n <= cc.mallocs; n++ {
			what := fmt.Sprintf("%s: call %d with malloc %d of %d failing", c.name, j, n, cc.mallocs)
			k := 0
			seen := false
			s.callHook = func(cb *caseBuffers, call func() (int32, error)) (int32, error) {
				k++
				if k-1 != j {
					if err := faultArm(s, 0); err != nil {
						return 0, err
					}
					return call()
				}
				seen = true
				names := make([]string, 0, len(cb.byName))
				before := map[string][]byte{}
				for name, b := range cb.byName {
					names = append(names, name)
					before[name] = bytes.Clone(b.U8())
				}
				if err := faultArm(s, n); err != nil {
					return 0, err
				}
				st, err := call()
				if err != nil {
					t.Errorf("%s: %v", what, err)
					return st, err
				}
				if st != ir.StatusNoMemory {
					t.Errorf("%s: status %d (%s), want %d NO_MEMORY", what, st, s.strerror(st), ir.StatusNoMemory)
				}
				if got := faultCount(s, "attnc_fault_calls"); got != n {
					t.Errorf("%s: %d mallocs, want none after the failing one", what, got)
				}
				if live := faultCount(s, "attnc_fault_live"); live != 0 {
					t.Errorf("%s: %d allocations left unfreed", what, live)
				}
				for _, name := range names {
					if !bytes.Equal(before[name], cb.byName[name].U8()) {
						t.Errorf("%s: buffer %s was written%s", what, name, firstDiff(name, cb.byName[name].U8(), before[name]))
					}
				}
				return st, err
			}
			c.run()
			if !seen {
				t.Errorf("%s: the run made only %d entry calls", what, k)
			}
		}
	}
	// A failure leaves nothing behind: the next run is right.
	s.callHook = func(cb *caseBuffers, call func() (int32, error)) (int32, error) {
		if err := faultArm(s, 0); err != nil {
			return 0, err
		}
		return call()
	}
	for _, r := range c.run() {
		if !r.Pass {
			t.Errorf("%s, after the failures: %s", c.name, r)
		}
	}
}

// TestAllocationFailureCUDA runs the allocation-failure check on the
// emulated CUDA launchers: split-KV decode allocates its partials before
// any launch, and each allocation failing in turn must return NO_MEMORY
// with every buffer untouched, nothing leaked, and leave no runtime error
// behind for the next call.
func TestAllocationFailureCUDA(t *testing.T) {
	t.Parallel()
	needEmu(t)
	v := spec(t, nomemSpecs[0])
	dir := t.TempDir()
	s, err := BuildCUDAWith(v, dir, Options{Link: faultLink(t, dir, "aligned_alloc", "size_t a, size_t n", "a, n")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	ps := v.PageSize
	// 1 sequence x 2 kv heads: fewer items than the emulator's 2 x 4 SMs
	// workers, so decode splits.
	split := reference.CaseSpec{Name: "decode long single", QLens: []int{1}, KVLens: []int{300 + ps}, NaNFill: true}
	runFaults(t, s, nomemCall{name: "decode split", run: func() []Result {
		return []Result{s.RunAttention(ir.RoleDecode, split, 11, 1)}
	}, minMallocs: 2})
}
