package attnc_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/needtool"
	_ "github.com/attnc/attnc/internal/testgc"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
)

// causalSpec and windowSpec differ only in the mask: a pass that ANDs
// q_pos - kv_pos <= 7 into causalSpec's mask must give windowSpec's
// kernels.
const (
	causalSpec = `variant win {
  heads    qo = 4, kv = 2
  head_dim 64
  dtype    f32
  cache    paged(page_size = 4)
  mask     causal
}
`
	windowSpec = `variant win {
  heads    qo = 4, kv = 2
  head_dim 64
  dtype    f32
  cache    paged(page_size = 4)
  mask     window(left = 7)
}
`
)

// windowPass ANDs q_pos - kv_pos <= w into the @mask Def and counts its
// runs.
func windowPass(name string, w int64, runs *atomic.Int64) passes.Pass {
	return passes.Pass{
		Name: name,
		Desc: fmt.Sprintf("narrow the mask to q_pos - kv_pos <= %d", w),
		Run: func(m *ir.Module) (*ir.Module, error) {
			if runs != nil {
				runs.Add(1)
			}
			d := m.Def("mask")
			if d == nil {
				return nil, fmt.Errorf("module %s has no @mask Def", m.Name)
			}
			near := ir.Bin(ir.Le, ir.Bin(ir.Sub, ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32)), ir.Int(w))
			return m.WithDef(&ir.Def{Name: d.Name, Params: d.Params, Body: ir.Bin(ir.And, d.Body, near)}), nil
		},
	}
}

func compile(t *testing.T, src string, opt attnc.Options) *attnc.Result {
	t.Helper()
	r, err := attnc.Compile("win.attn", []byte(src), opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func variant(t *testing.T, src string) *ir.Variant {
	t.Helper()
	vs, err := frontend.Parse("win.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return vs[0]
}

// TestCompileIsBuild checks that Compile and CompileFiles give exactly the
// files the build driver gives for the same targets.
func TestCompileIsBuild(t *testing.T) {
	spec := filepath.Join("examples", "llama3_8b.attn")
	src, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, targets := range [][]string{nil, {"cpu"}, {"cuda"}, {"cpu", "cuda"}} {
		r, err := attnc.Compile(spec, src, attnc.Options{Targets: targets})
		if err != nil {
			t.Fatal(err)
		}
		rf, err := attnc.CompileFiles([]string{spec}, attnc.Options{Targets: targets})
		if err != nil {
			t.Fatal(err)
		}
		vs, err := driver.ParseSpecs([]string{spec})
		if err != nil {
			t.Fatal(err)
		}
		out, err := driver.Build(vs, driver.Options{Targets: targets})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Artifacts) != len(r.Files) || len(rf.Files) != len(r.Files) {
			t.Errorf("targets %v: %d files, build wrote %d, CompileFiles %d", targets, len(r.Files), len(out.Artifacts), len(rf.Files))
		}
		for _, a := range out.Artifacts {
			if !bytes.Equal(r.Files[a.Name], a.Data) || !bytes.Equal(rf.Files[a.Name], a.Data) {
				t.Errorf("targets %v: %s differs from the build driver's", targets, a.Name)
			}
		}
		want := []string{"llama3_8b.h", "manifest.json"}
		if targets == nil || slices.Contains(targets, "cpu") {
			want = append(want, "llama3_8b.ll")
		}
		if slices.Contains(targets, "cuda") {
			want = append(want, "llama3_8b.cu")
		}
		slices.Sort(want)
		if got := r.Names(); !slices.Equal(got, want) {
			t.Errorf("targets %v: files %v, want %v", targets, got, want)
		}
	}
}

// TestInsertBeforeInlineDefs: a user pass before inline-defs that narrows
// the @mask Def of a causal variant to a 7-token window changes the .ll and
// the .cu (which then test the window), not the header, and the manifest
// records the pass; the kernels compile and compute the window variant's
// attention, on the CPU and on the CUDA emulator.
func TestInsertBeforeInlineDefs(t *testing.T) {
	var runs atomic.Int64
	ins := []attnc.Insertion{{Before: "inline-defs", Pass: windowPass("window-7", 7, &runs)}}
	opt := attnc.Options{Targets: []string{"cpu", "cuda"}, VerifyEach: true}
	base := compile(t, causalSpec, opt)
	opt.Insert = ins
	with := compile(t, causalSpec, opt)
	if n := runs.Load(); n != 2 {
		t.Errorf("the user pass ran %d times, want 2 (the cpu and the cuda module)", n)
	}
	if !slices.Equal(base.Names(), with.Names()) {
		t.Fatalf("files %v, want %v", with.Names(), base.Names())
	}
	for _, f := range []string{"win.ll", "win.cu"} {
		if bytes.Equal(base.Files[f], with.Files[f]) {
			t.Errorf("%s did not change", f)
		}
	}
	if !bytes.Equal(base.Files["win.h"], with.Files["win.h"]) {
		t.Error("win.h changed: the pass must not change the ABI")
	}
	window := "(attnc_sub_i32(q_pos, kv_pos) <= ((int32_t)7))"
	if strings.Contains(string(base.Files["win.cu"]), window) || !strings.Contains(string(with.Files["win.cu"]), window) {
		t.Errorf("the element mask %s must appear in win.cu with the pass only", window)
	}
	for _, target := range []string{"cpu", "cuda"} {
		got := with.Manifest.Targets[target].Passes
		want := append([]string{"window-7"}, base.Manifest.Targets[target].Passes...)
		if !slices.Equal(got, want) {
			t.Errorf("manifest targets.%s.passes = %v, want %v", target, got, want)
		}
		if m := with.Module(target, "win"); m == nil || ir.ExprString(m.Def("mask").Body) != "((kv_pos <= q_pos) & ((q_pos - kv_pos) <= 7))" {
			t.Errorf("%s: the final module's mask is not the narrowed one", target)
		}
	}
	if got := with.Manifest.Variants[0].Rules["def mask"]; got != "((kv_pos <= q_pos) & ((q_pos - kv_pos) <= 7))" {
		t.Errorf("manifest def mask = %q", got)
	}
	if !strings.Contains(string(with.Files["manifest.json"]), `"window-7"`) {
		t.Error("manifest.json does not name the user pass")
	}

	// The kernels compile and compute the window variant.
	causal, win := variant(t, causalSpec), variant(t, windowSpec)
	t.Run("cpu", func(t *testing.T) {
		needtool.Check(t, cpurt.Tools())
		table, err := attnc.PassTable("cpu", ins)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		s, err := conformance.BuildWith(causal, dir, conformance.Options{Passes: table})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Lib.Close()
		checkSameFile(t, filepath.Join(dir, "win.ll"), with.Files["win.ll"])
		checkWindow(t, s, causal, win, []int{1, 3})
	})
	t.Run("cuda", func(t *testing.T) {
		_, err := cuda.GXX()
		needtool.Check(t, err)
		table, err := attnc.PassTable("cuda", ins)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		s, err := conformance.BuildCUDAWith(causal, dir, conformance.Options{Passes: table})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Lib.Close()
		checkSameFile(t, filepath.Join(dir, "win.cu"), with.Files["win.cu"])
		checkWindow(t, s, causal, win, []int{1})
	})
}

func checkSameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s (built by conformance with the same table) differs from Result.Files", filepath.Base(path))
	}
}

// checkWindow runs the suite's matrix against the window variant's
// reference (every case must pass) and a long prefill against the causal
// reference, which it must fail: the pass is what makes the difference.
func checkWindow(t *testing.T, s *conformance.Suite, causal, win *ir.Variant, threads []int) {
	t.Helper()
	s.V = win
	n := 0
	for _, r := range s.RunAll(threads, 5) {
		n++
		if !r.Pass {
			t.Errorf("%s", r)
		}
	}
	s.V = causal
	spec := conformance.Matrix(causal)[3] // one long chunk over many pages
	if r := s.RunAttention(ir.RolePrefill, spec, 5, threads[0]); r.Pass {
		t.Errorf("the kernels with the window pass match the causal reference on %q", spec.Name)
	}
	t.Logf("%s: %d cases pass against the window reference", s.Target, n)
}

// TestInsertIsLocal runs Compile concurrently with two different
// insertions and without any: each result sees only its own pass, each
// pass runs only for its own calls, and the standard table is unchanged.
func TestInsertIsLocal(t *testing.T) {
	names := func() map[string][]string {
		out := map[string][]string{}
		for _, tg := range attnc.Targets() {
			table, err := attnc.PassTable(tg, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range table {
				out[tg] = append(out[tg], p.Name)
			}
		}
		return out
	}
	tables := names()
	plain := compile(t, causalSpec, attnc.Options{Targets: []string{"cpu", "cuda"}})
	var runsA, runsB atomic.Int64
	insA := []attnc.Insertion{{Before: "inline-defs", Pass: windowPass("window-a", 3, &runsA)}}
	insB := []attnc.Insertion{{After: "simplify", Pass: windowPass("window-b", 5, &runsB)}}
	const rounds = 4
	results := make([][3]*attnc.Result, rounds)
	var wg sync.WaitGroup
	for i := range rounds {
		for j, ins := range [][]attnc.Insertion{insA, insB, nil} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := attnc.Compile("win.attn", []byte(causalSpec), attnc.Options{Targets: []string{"cpu", "cuda"}, Insert: ins})
				if err != nil {
					t.Error(err)
					return
				}
				results[i][j] = r
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if a, b := runsA.Load(), runsB.Load(); a != 2*rounds || b != 2*rounds {
		t.Errorf("user passes ran %d and %d times, want %d each", a, b, 2*rounds)
	}
	for i := range rounds {
		a, b, none := results[i][0], results[i][1], results[i][2]
		for _, target := range []string{"cpu", "cuda"} {
			pa, pb, pn := a.Manifest.Targets[target].Passes, b.Manifest.Targets[target].Passes, none.Manifest.Targets[target].Passes
			if !slices.Contains(pa, "window-a") || slices.Contains(pa, "window-b") ||
				!slices.Contains(pb, "window-b") || slices.Contains(pb, "window-a") ||
				slices.Contains(pn, "window-a") || slices.Contains(pn, "window-b") {
				t.Errorf("round %d %s: passes %v / %v / %v", i, target, pa, pb, pn)
			}
		}
		if i > 0 && (!bytes.Equal(a.Files["win.ll"], results[0][0].Files["win.ll"]) || !bytes.Equal(b.Files["win.cu"], results[0][1].Files["win.cu"])) {
			t.Errorf("round %d: concurrent builds with the same insertion differ", i)
		}
		for name, data := range plain.Files {
			if !bytes.Equal(none.Files[name], data) {
				t.Errorf("round %d: %s without insertions differs from a build before any insertion", i, name)
			}
		}
		if bytes.Equal(a.Files["win.ll"], b.Files["win.ll"]) {
			t.Errorf("round %d: different windows gave the same .ll", i)
		}
	}
	for tg, after := range names() {
		if !slices.Equal(after, tables[tg]) {
			t.Errorf("the %s table changed: %v, was %v", tg, after, tables[tg])
		}
	}
}

func TestInsertErrors(t *testing.T) {
	p := windowPass("window-7", 7, nil)
	cases := []struct {
		name string
		opt  attnc.Options
		want string
	}{
		{"unknown pass", attnc.Options{Insert: []attnc.Insertion{{Before: "inline-def", Pass: p}}}, `no target's pass table has a pass named "inline-def"`},
		{"both names", attnc.Options{Insert: []attnc.Insertion{{Before: "simplify", After: "simplify", Pass: p}}}, "exactly one of Before and After"},
		{"no name", attnc.Options{Insert: []attnc.Insertion{{Pass: p}}}, "exactly one of Before and After"},
		{"duplicate name", attnc.Options{Insert: []attnc.Insertion{{Before: "simplify", Pass: passes.Pass{Name: "simplify", Run: p.Run}}}}, "already has a pass of that name"},
		{"no function", attnc.Options{Insert: []attnc.Insertion{{Before: "simplify", Pass: passes.Pass{Name: "x"}}}}, "has no Run function"},
		{"print-after unknown", attnc.Options{PrintAfter: "window-7"}, `no pass named "window-7"`},
		{"unknown target", attnc.Options{Targets: []string{"tpu"}}, `unknown target "tpu"`},
		{"unknown triple", attnc.Options{Triple: "riscv64-unknown-linux-gnu"}, `unknown target triple "riscv64-unknown-linux-gnu"`},
		{"triple without cpu", attnc.Options{Targets: []string{"cuda"}, Triple: "aarch64-unknown-linux-gnu"}, "applies to the cpu target"},
		{"placed after a pass it must precede", attnc.Options{Insert: []attnc.Insertion{{After: "legalize-dtype", Pass: p,
			Constraints: []passes.Constraint{{Before: "window-7", After: "expand-calls", Why: "it writes calls"}}}}},
			"window-7 must run before expand-calls: it writes calls"},
		{"constraint without the pass", attnc.Options{Insert: []attnc.Insertion{{Before: "simplify", Pass: p,
			Constraints: []passes.Constraint{{Before: "simplify", After: "expand-calls"}}}}}, "does not name it"},
	}
	for _, c := range cases {
		_, err := attnc.Compile("win.attn", []byte(causalSpec), c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	// A pass may not change a kernel's parameters: the header and the
	// manifest describe the lowered ABI.
	abi := passes.Pass{Name: "lse-required", Run: func(m *ir.Module) (*ir.Module, error) {
		out := *m
		out.Kernels = nil
		for _, k := range m.Kernels {
			nk := *k
			nk.Params = nil
			for _, p := range k.Params {
				np := *p
				np.Null = np.Null && p.Name != "lse"
				nk.Params = append(nk.Params, &np)
			}
			out.Kernels = append(out.Kernels, &nk)
		}
		return &out, nil
	}}
	for _, target := range []string{"cpu", "cuda"} {
		_, err := attnc.Compile("win.attn", []byte(causalSpec), attnc.Options{Targets: []string{target},
			Insert: []attnc.Insertion{{After: "late-simplify", Pass: abi}}})
		if err == nil || !strings.Contains(err.Error(), "passes must keep a kernel's ABI") {
			t.Errorf("%s: a pass that changes a kernel's parameters: %v", target, err)
		}
	}

	// An insertion chained after another user pass, and --print-after of a
	// user pass, are fine.
	var log bytes.Buffer
	q := windowPass("window-5", 5, nil)
	_, err := attnc.Compile("win.attn", []byte(causalSpec), attnc.Options{
		Insert:     []attnc.Insertion{{Before: "inline-defs", Pass: p}, {After: "window-7", Pass: q}},
		PrintAfter: "window-5", Log: &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), "// --- after window-5 (cpu) ---"); n != 1 || !strings.Contains(log.String(), "<= 5)") {
		t.Errorf("--print-after=window-5 printed %d modules:\n%.300s", n, log.String())
	}
	_, err = attnc.Compile("bad.attn", []byte("variant x {\n  heads qo = 0\n}\n"), attnc.Options{})
	if err == nil || !regexp.MustCompile(`^bad\.attn:\d+:\d+: `).MatchString(err.Error()) {
		t.Errorf("a spec error must be located in the file: %v", err)
	}
}

// TestSelect checks Result.Select against the registry on the build
// driver's module, and its errors.
func TestSelect(t *testing.T) {
	r := compile(t, causalSpec, attnc.Options{})
	shapes := []registry.Shape{
		{QLens: []int{1}, KVLens: []int{4096}, Threads: 8},
		{QLens: []int{1, 1}, KVLens: []int{10, 300}, Threads: 2},
		{QLens: []int{5, 1}, KVLens: []int{9, 300}, Threads: 4},
	}
	cv, err := driver.CompileFor(variant(t, causalSpec), "cpu", driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shapes {
		got, err := r.Select("win", "cpu", s)
		if err != nil {
			t.Fatal(err)
		}
		want, err := cv.Select(s)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: %+v, want %+v", s, got, want)
		}
	}
	for _, c := range []struct{ variant, target, want string }{
		{"nope", "cpu", `no variant "nope"`},
		{"win", "cuda", "was not built for target cuda"},
		{"win", "tpu", `unknown target "tpu"`},
	} {
		if _, err := r.Select(c.variant, c.target, shapes[0]); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Select(%s, %s): %v, want %q", c.variant, c.target, err, c.want)
		}
	}
	rc := compile(t, causalSpec, attnc.Options{Targets: []string{"cuda"}})
	sel, err := rc.Select("win", "cuda", registry.Shape{QLens: []int{1}, KVLens: []int{4096}, SMs: 4})
	if err != nil || sel.Target != "cuda" || sel.Role != ir.RoleDecode || len(sel.Launches) == 0 || sel.Launches[0].Block != 128 || sel.Launches[0].Grid <= 0 {
		t.Errorf("Select on cuda: %+v, %v; want a decode launch with its grid and a block of 128 threads", sel, err)
	}
}

// TestTriple: the cpu target's triple reaches the .ll header and the
// manifest, and decides the CPU levels the work kernels are cloned for
// (f32 kernels have no x86-64-v4-bf16 clone, and their .ll does not name
// it); the C header is the same.
func TestTriple(t *testing.T) {
	x86 := compile(t, causalSpec, attnc.Options{})
	arm := compile(t, causalSpec, attnc.Options{Triple: "aarch64-unknown-linux-gnu"})
	if got := x86.Manifest.Targets["cpu"].Triple; got != "x86_64-unknown-linux-gnu" {
		t.Errorf("default triple in the manifest: %q", got)
	}
	if got := arm.Manifest.Targets["cpu"].Triple; got != "aarch64-unknown-linux-gnu" {
		t.Errorf("aarch64 triple in the manifest: %q", got)
	}
	if !strings.Contains(string(arm.Files["win.ll"]), "target triple = \"aarch64-unknown-linux-gnu\"\n") {
		t.Error("the aarch64 .ll does not name its triple")
	}
	if got := strings.Join(x86.Manifest.Targets["cpu"].Levels, " "); got != "x86-64 x86-64-v3 x86-64-v4 x86-64-v4-bf16 x86-64-amx" {
		t.Errorf("x86-64 levels in the manifest: %q", got)
	}
	if got := strings.Join(arm.Manifest.Targets["cpu"].Levels, " "); got != "neon" {
		t.Errorf("aarch64 levels in the manifest: %q", got)
	}
	for _, c := range []struct {
		ll       string
		has, not []string
	}{
		{string(x86.Files["win.ll"]), []string{"@win_decode_work_x86_64(", "@win_decode_work_x86_64_v3(", "@win_decode_work_x86_64_v4(", `"target-cpu"="x86-64-v4"`}, []string{"_neon(", "+neon", "_v4_bf16("}},
		{string(arm.Files["win.ll"]), []string{"@win_decode_work_neon(", `"target-features"="+fp-armv8,+neon"`}, []string{"_x86_64", "x86-64"}},
	} {
		for _, h := range c.has {
			if !strings.Contains(c.ll, h) {
				t.Errorf("the .ll lacks %s", h)
			}
		}
		for _, n := range c.not {
			if strings.Contains(c.ll, n) {
				t.Errorf("the .ll has %s, a level of the other triple", n)
			}
		}
	}
	if !bytes.Equal(x86.Files["win.h"], arm.Files["win.h"]) {
		t.Error("the header depends on the triple")
	}
}
