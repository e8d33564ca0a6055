package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/attnc/attnc/internal/needtool"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/cpu"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

const llama3 = "../examples/llama3_8b.attn"

// unsupportedSpec combines inline RoPE with MLA, which attnc rejects at
// build time ("not supported yet"): every DESIGN example is supported.
const unsupportedSpec = `variant mla_rope {
  mla(heads = 16, kv_lora_rank = 64, rope_dim = 32)
  dtype bf16
  cache paged(page_size = 16)
  rope inline(theta = 10000)
  scale 0.1
}
`

// unsupported writes unsupportedSpec to a temporary file.
func unsupported(t *testing.T) string { return writeSpec(t, "mla_rope.attn", unsupportedSpec) }

// runCLI runs the command line in-process and returns its output and exit status.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = Run(args, &o, &e)
	return o.String(), e.String(), code
}

// mustRun runs args and fails the test unless the exit status is 0.
func mustRun(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	o, e, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("attnc %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, o, e)
	}
	return o, e
}

// readDir returns every file in dir by name.
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

func writeSpec(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// needTools skips a test that needs LLVM 14 and gcc (and, with cgo, the
// ability to load generated kernels) when they are missing, except in CI
// (CI=true), where a missing tool is a failure.
func needTools(t *testing.T, cgo bool) {
	t.Helper()
	err := cpurt.Tools()
	if err == nil && cgo && !cgoEnabled {
		err = errors.New("this test binary was built with CGO_ENABLED=0")
	}
	needtool.Check(t, err)
}

func TestBuildIsDeterministic(t *testing.T) {
	d1, d2 := t.TempDir(), filepath.Join(t.TempDir(), "other")
	mustRun(t, "build", llama3, "--target", "cpu", "-o", d1)
	mustRun(t, "build", llama3, "-o", d2)
	f1, f2 := readDir(t, d1), readDir(t, d2)
	for _, name := range []string{"llama3_8b.ll", "llama3_8b.h", "manifest.json"} {
		if _, ok := f1[name]; !ok {
			t.Errorf("build wrote no %s (wrote %v)", name, keys(f1))
		}
	}
	if !slices.Equal(keys(f1), keys(f2)) {
		t.Fatalf("the two builds wrote different files: %v vs %v", keys(f1), keys(f2))
	}
	for name, b := range f1 {
		if !bytes.Equal(b, f2[name]) {
			t.Errorf("%s differs between two builds", name)
		}
	}

	var m struct {
		ABI     *int    `json:"abi"`
		LSEBase *string `json:"lse_base"`
		Kernels []struct {
			Role   string `json:"role"`
			Symbol string `json:"symbol"`
			Entry  bool   `json:"entry"`
			Target string `json:"target"`
			Args   []struct {
				Name string `json:"name"`
				Kind string `json:"kind"`
			} `json:"args"`
		} `json:"kernels"`
	}
	if err := json.Unmarshal(f1["manifest.json"], &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if m.ABI == nil || *m.ABI != 1 {
		t.Errorf(`manifest "abi" = %v, want 1`, m.ABI)
	}
	if m.LSEBase == nil || *m.LSEBase != "e" {
		t.Errorf(`manifest "lse_base" = %v, want "e"`, m.LSEBase)
	}
	found := false
	for _, k := range m.Kernels {
		if k.Role != "prefill" || !k.Entry {
			continue
		}
		found = true
		if len(k.Args) < 2 || k.Args[0].Name != "q" || k.Args[1].Name != "qo_indptr" {
			t.Errorf("prefill entry %s args start %v, want q, qo_indptr", k.Symbol, k.Args)
		}
		if !strings.Contains(string(f1["llama3_8b.h"]), "int32_t "+k.Symbol+"(") {
			t.Errorf("llama3_8b.h does not declare %s", k.Symbol)
		}
	}
	if !found {
		t.Errorf("manifest has no prefill entry: %s", f1["manifest.json"])
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestCheck(t *testing.T) {
	bad := unsupported(t)
	o, _ := mustRun(t, "check", llama3)
	if o != "ok llama3_8b\n" {
		t.Errorf("check %s printed %q, want %q", llama3, o, "ok llama3_8b\n")
	}
	o, e, code := runCLI(t, "check", bad)
	if code != 1 {
		t.Errorf("check %s: exit %d, want 1", bad, code)
	}
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(bad) + `:\d+:\d+: not supported yet`)
	if !want.MatchString(e) {
		t.Errorf("check %s: stderr %q does not match %s", bad, e, want)
	}
	if strings.Contains(o, "ok mla_rope") {
		t.Errorf("check printed ok for an unsupported variant: %q", o)
	}

	// Every variant is checked: the supported one still reports ok.
	_, e, code = runCLI(t, "check", bad, llama3)
	if code != 1 || !strings.Contains(e, "not supported yet") {
		t.Errorf("check of both specs: exit %d, stderr %q", code, e)
	}

	// Every file is checked: a file that does not parse hides nothing.
	syntax := writeSpec(t, "syntax.attn", "variant broken {\n  heads qo = = 4\n}\n")
	dup := writeSpec(t, "dup.attn", "variant llama3_8b {\n  heads qo = 2\n  head_dim 64\n}\n")
	o, e, code = runCLI(t, "check", syntax, llama3, bad, dup)
	if code != 1 || o != "ok llama3_8b\n" {
		t.Errorf("check of four files: exit %d, stdout %q, want 1 and ok llama3_8b", code, o)
	}
	for _, want := range []string{syntax + ":2:", bad + ":", dup + ":1:1: variant llama3_8b already defined at " + llama3} {
		if !strings.Contains(e, want) {
			t.Errorf("check of four files: stderr lacks %q:\n%s", want, e)
		}
	}
}

func TestBadSpecErrorsHavePositions(t *testing.T) {
	cases := map[string]string{
		"semantic.attn": "variant bad {\n  heads qo = 4, kv = 2\n  head_dim 64\n  dtype f64\n}\n",
		"syntax.attn":   "variant bad {\n  heads qo = 4, kv = 2\n  head_dim = = 64\n}\n",
		"pagesize.attn": "variant bad {\n  heads qo = 4, kv = 2\n  head_dim 64\n  cache paged(page_size = 3)\n}\n",
	}
	for name, src := range cases {
		p := writeSpec(t, name, src)
		want := regexp.MustCompile(`^` + regexp.QuoteMeta(p) + `:\d+:\d+: \S`)
		for _, args := range [][]string{{"check", p}, {"build", p, "-o", t.TempDir()}} {
			o, e, code := runCLI(t, args...)
			if code != 1 {
				t.Errorf("%s %s: exit %d, want 1 (stdout %q)", args[0], name, code, o)
			}
			if !want.MatchString(e) {
				t.Errorf("%s %s: stderr %q is not file:line:col: message", args[0], name, e)
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"build", llama3, "--target", "cpu,nosuch", "-o", dir}, `unknown target "nosuch" (known: cpu`},
		{[]string{"build", llama3}, "-o DIR is required"},
		{[]string{"build", "-o", dir}, "no spec file given"},
		{[]string{"build", llama3, "-o", dir, "--print-after", "nosuch"}, `no pass named "nosuch"`},
		{[]string{"build", filepath.Join(dir, "missing.attn"), "-o", dir}, "missing.attn"},
		{[]string{"build", "--nosuch"}, "unknown flag"},
	} {
		_, e, code := runCLI(t, tc.args...)
		if code != 1 || !strings.Contains(e, tc.want) {
			t.Errorf("attnc %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tc.args, " "), code, e, tc.want)
		}
	}
}

func TestBuildPrintAfterAndDumpDir(t *testing.T) {
	out, dump := t.TempDir(), t.TempDir()
	_, e := mustRun(t, "build", llama3, "-o", out, "--target", strings.Join(targets.Names(), ","), "--verify-each", "--print-after=all", "--dump-dir", dump)
	dumped := readDir(t, dump)
	for _, tg := range targets.All() {
		for i, p := range tg.Passes() {
			if !strings.Contains(e, "// --- after "+p.Name+" ("+tg.Name()+") ---") {
				t.Errorf("--print-after=all: stderr lacks the IR after %s (%s)", p.Name, tg.Name())
			}
			name := fmt.Sprintf("llama3_8b.%s.%02d-%s.ir", tg.Name(), i+1, p.Name)
			if _, ok := dumped[name]; !ok {
				t.Errorf("--dump-dir did not write %s: %v", name, keys(dumped))
			}
		}
	}
	// A pass only the CUDA table has prints once, for CUDA.
	_, e = mustRun(t, "build", llama3, "-o", out, "--target", "cpu,cuda", "--print-after", "map-threads")
	if n := strings.Count(e, "// --- after "); n != 1 || !strings.Contains(e, "// --- after map-threads (cuda) ---") {
		t.Errorf("--print-after=map-threads printed %d modules, want the cuda one:\n%.300s", n, e)
	}
	_, e, code := runCLI(t, "build", llama3, "-o", out, "--print-after", "map-threads")
	if code != 1 || !strings.Contains(e, `no pass named "map-threads" in the cpu tables`) {
		t.Errorf("--print-after=map-threads for the cpu target: exit %d, stderr %q", code, e)
	}
}

func TestPasses(t *testing.T) {
	for _, tg := range targets.All() {
		o, _ := mustRun(t, "passes", "--target", tg.Name())
		lines := strings.Split(o, "\n")
		if len(lines) < 3 || lines[0] != "target "+tg.Name()+" (writes "+tg.Files()+"):" || !strings.Contains(lines[2], "inline-defs") {
			t.Fatalf("passes --target %s does not list inline-defs first:\n%s", tg.Name(), o)
		}
		last := -1
		for _, p := range tg.Passes() {
			// The pass's row: its number, then its name (a description
			// may name another pass).
			loc := regexp.MustCompile(`(?m)^\d+\s+` + regexp.QuoteMeta(p.Name) + ` `).FindStringIndex(o)
			i := -1
			if loc != nil {
				i = loc[0]
			}
			if i < 0 || i < last {
				t.Errorf("%s: pass %s missing or out of order:\n%s", tg.Name(), p.Name, o)
			}
			last = i
			kind := "optional"
			if p.Required {
				kind = "required"
			}
			if !regexp.MustCompile(`(?m)^\d+\s+` + regexp.QuoteMeta(p.Name) + `\s+` + kind).MatchString(o) {
				t.Errorf("%s: pass %s is not shown as %s", tg.Name(), p.Name, kind)
			}
		}
		for _, c := range tg.Constraints() {
			if !strings.Contains(o, c.Before+" before "+c.After+": "+c.Why) {
				t.Errorf("%s: constraint %s before %s is not listed with its reason", tg.Name(), c.Before, c.After)
			}
		}
	}
	if _, e, code := runCLI(t, "passes", "--target", "nosuch"); code != 1 || !strings.Contains(e, `unknown target "nosuch"`) {
		t.Errorf("passes --target nosuch: exit %d, stderr %q", code, e)
	}
}

func TestExplain(t *testing.T) {
	bad := unsupported(t)
	o, _ := mustRun(t, "explain", llama3)
	for _, want := range []string{"variant llama3_8b", "llama3_8b_prefill", "dispatch rules:"} {
		if !strings.Contains(o, want) {
			t.Errorf("explain output lacks %q:\n%s", want, o)
		}
	}
	o, _ = mustRun(t, "explain", llama3, "--batch", "1", "--kv-len", "4096", "--threads", "1,16")
	if n := len(regexp.MustCompile(`(?m)^  batch=1 q_len=1 kv_len=4096 threads=\d+ -> decode `).FindAllString(o, -1)); n != 2 {
		t.Errorf("explain with a decode shape and two thread counts gave %d decode decisions:\n%s", n, o)
	}
	o, _ = mustRun(t, "explain", llama3, "--q-len", "5,17", "--kv-len", "100,300", "--threads", "4")
	if !strings.Contains(o, "batch=2 q_len=5,17 kv_len=100,300 threads=4 -> prefill") {
		t.Errorf("explain with a prefill shape:\n%s", o)
	}
	o, _ = mustRun(t, "explain", llama3, "--target", "cuda", "--batch", "1", "--kv-len", "4096", "--sms", "132")
	for _, want := range []string{"cuda decode       llama3_8b_decode_launch (entry)", "block 128, dynamic shared memory",
		"batch=1 q_len=1 kv_len=4096 sms=132 -> decode via llama3_8b_decode_launch, KV split in 33 chunks, merged with merge_state; llama3_8b_decode_split_work grid=264 block=128"} {
		if !strings.Contains(o, want) {
			t.Errorf("explain --target cuda lacks %q:\n%s", want, o)
		}
	}
	// --role selects an entry other than the paged prefill/decode pair.
	ragged := filepath.Join(t.TempDir(), "ragged.attn")
	if err := os.WriteFile(ragged, []byte("variant rg {\n heads qo = 8, kv = 2\n head_dim 64\n dtype f16\n cache paged(page_size = 16)\n kernels prefill, merge_state, prefill_ragged\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, _ = mustRun(t, "explain", ragged, "--role", "prefill_ragged", "--q-len", "1", "--kv-len", "1", "--batch", "3", "--threads", "4")
	for _, want := range []string{"cpu  prefill_ragged rg_prefill_ragged (entry)", "(q, qo_indptr, k, v, kv_token_indptr, batch_size, o, lse)",
		"batch=3 q_len=1 kv_len=1 threads=4 -> prefill_ragged via rg_prefill_ragged, 6 work items"} {
		if !strings.Contains(o, want) {
			t.Errorf("explain --role prefill_ragged lacks %q:\n%s", want, o)
		}
	}
	if _, e, code := runCLI(t, "explain", ragged, "--role", "decode", "--kv-len", "4"); code != 1 || !strings.Contains(e, "--role decode: give prefill_ragged") {
		t.Errorf("explain --role decode: exit %d, stderr %q", code, e)
	}
	_, e, code := runCLI(t, "explain", llama3, "--q-len", "5,17", "--kv-len", "100,300,4")
	if code != 1 || !strings.Contains(e, "--q-len has 2 values") {
		t.Errorf("explain with mismatched lists: exit %d, stderr %q", code, e)
	}
	// A shape the variant refuses is an error, with no empty selection list before it.
	o, e, code = runCLI(t, "explain", llama3, "--q-len", "5", "--kv-len", "3")
	if code != 1 || !strings.Contains(e, "q_len 5 > kv_len 3") || strings.Contains(o, "selection:") {
		t.Errorf("explain with q_len > kv_len: exit %d, stderr %q, stdout ends %q", code, e, o[max(0, len(o)-80):])
	}
	_, e, code = runCLI(t, "explain", bad)
	if code != 1 || !strings.Contains(e, "not supported yet") {
		t.Errorf("explain %s: exit %d, stderr %q", bad, code, e)
	}
}

// TestExplainReclaim checks that explain states how an engine reclaims
// window pages: the rule, and the pages for a given kv_len.
func TestExplainReclaim(t *testing.T) {
	p := writeSpec(t, "win.attn", `variant win { heads qo = 4, kv = 2
	  head_dim 64
	  cache paged(page_size = 16)
	  mask window(left = 1019)
	  sinks tokens(4) }`)
	o, _ := mustRun(t, "explain", p, "--kv-len", "1000,5000", "--batch", "2")
	for _, want := range []string{
		"reclaim: page p of a sequence (0-based table entry) with (p + 1) * page_size <= from - 1019 and ceil(4 / page_size) <= p",
		// 5000 - 1019 = 3981 = 248*16 + 13: pages 1..247 (page 0 holds the sinks).
		"kv_len=1000 -> none of its 63 pages",
		"kv_len=5000 -> pages 1..247 of its 313 (247 pages) may be reused, named or as -1",
	} {
		if !strings.Contains(o, want) {
			t.Errorf("explain output lacks %q:\n%s", want, o)
		}
	}
	o, _ = mustRun(t, "explain", llama3, "--kv-len", "5000")
	if !strings.Contains(o, "reclaim: none") || strings.Contains(o, "may be reused") {
		t.Errorf("explain of a causal variant offers pages to reclaim:\n%s", o)
	}
}

func TestVersion(t *testing.T) {
	o, _ := mustRun(t, "version")
	if !strings.HasPrefix(o, "attnc ") || !strings.Contains(o, "ABI 1") {
		t.Errorf("version printed %q", o)
	}
}

const smallSpec = `variant small {
  heads qo = 4, kv = 2
  head_dim 64
  dtype f32
  cache paged(page_size = 4)
  mask causal
}
`

func TestVerifySmall(t *testing.T) {
	needTools(t, true)
	p := writeSpec(t, "small.attn", smallSpec)
	o, e, code := runCLI(t, "verify", p, "--threads", "1,4", "--seed", "3", hostLevels())
	if code != 0 {
		t.Fatalf("verify: exit %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
	if !regexp.MustCompile(`(?m)^[1-9]\d* passed, 0 failed$`).MatchString(o) {
		t.Errorf("verify summary missing or wrong:\n%s", o)
	}
	for _, k := range []string{"small_prefill", "small_decode", "small_merge_state"} {
		if !strings.Contains(o, "PASS "+k) {
			t.Errorf("verify ran no passing case of %s:\n%s", k, o)
		}
	}
}

// TestVerifyDivisionByZero: a mask and a score that divide by zero at run
// time (DESIGN §3: the result is 0) pass check, build and verify; the
// kernels used to die of SIGFPE and the reference made verify report an
// internal error.
func TestVerifyDivisionByZero(t *testing.T) {
	needTools(t, true)
	p := writeSpec(t, "div.attn", `variant divzero {
  heads qo = 2, kv = 1
  head_dim 32
  dtype f32
  cache paged(page_size = 4)
  mask expr(kv_pos <= q_pos && q_pos % (kv_pos - 3) != 1)
  score score + 0.01 * (q_pos / (kv_pos - q_pos))
}
`)
	mustRun(t, "check", p)
	o, e, code := runCLI(t, "verify", p, "--threads", "1,3", hostLevels())
	if code != 0 || !regexp.MustCompile(`(?m)^[1-9]\d* passed, 0 failed$`).MatchString(o) {
		t.Errorf("verify: exit %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
}

func TestVerifySkipsUnsupported(t *testing.T) {
	bad := unsupported(t)
	needTools(t, true)
	o, e, code := runCLI(t, "verify", bad, hostLevels())
	if code != 0 {
		t.Fatalf("verify of an unsupported variant: exit %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
	if !strings.Contains(o, "skip mla_rope: ") || !strings.Contains(o, "0 passed, 0 failed") {
		t.Errorf("verify %s printed:\n%s", bad, o)
	}
}

// needEmu skips without g++ for the CUDA emulator, except in CI.
func needEmu(t *testing.T) {
	t.Helper()
	_, err := cuda.GXX()
	if err == nil && !cgoEnabled {
		err = errors.New("this test binary was built with CGO_ENABLED=0")
	}
	needtool.Check(t, err)
}

func TestVerifyCUDAEmulated(t *testing.T) {
	bad := unsupported(t)
	needEmu(t)
	p := writeSpec(t, "small.attn", smallSpec)
	o, e, code := runCLI(t, "verify", p, bad, "--target", "cuda", "--threads", "1,4")
	if code != 0 {
		t.Fatalf("verify --target cuda: exit %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
	for _, k := range []string{"small_prefill_launch", "small_decode_launch", "small_merge_state_launch"} {
		if !strings.Contains(o, "PASS "+k) {
			t.Errorf("verify --target cuda ran no passing case of %s:\n%s", k, o)
		}
	}
	// The launchers take no thread count: each case runs once (5 prefill
	// cases, a hidden page and NaN where masked; 2 decode cases, the same two;
	// merge_state).
	if strings.Contains(o, "threads=4") {
		t.Errorf("verify --target cuda ran cases per --threads value:\n%s", o)
	}
	if !regexp.MustCompile(`(?m)^[1-9]\d* passed, 0 failed \(1 skipped: not supported yet\)$`).MatchString(o) || !strings.Contains(o, "skip mla_rope: ") {
		t.Errorf("verify --target cuda summary:\n%s", o)
	}
}

func TestVerifyAndBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", llama3, "--target", "cpu", "--gpu"}, "use it with --target cuda"},
		{[]string{"verify", llama3, "--target", "tpu"}, `unknown --target "tpu" (cpu or cuda or hip)`},
		{[]string{"bench", llama3, "--target", "cuda"}, "add --gpu"},
		{[]string{"bench", llama3, "--target", "cpu", "--gpu"}, "use it with --target cuda"},
		{[]string{"bench", llama3, "--target", "tpu"}, `unknown --target "tpu"`},
		{[]string{"bench", llama3, "--gpu", "--cpu-levels", "host"}, "--cpu-levels applies to the cpu target; --gpu runs the GPU kernels, which have no CPU levels: drop --gpu to run the cpu kernels, or drop --cpu-levels"},
		{[]string{"bench", llama3, "--gpu", "--target", "cuda", "--cpu-levels", "host"}, "drop --gpu and --target to run the cpu kernels"},
		{[]string{"bench", llama3, "--target", "cuda", "--cpu-levels", "host"}, "--cpu-levels applies to the cpu target; use --target cpu, or drop --cpu-levels"},
		{[]string{"verify", llama3, "--gpu", "--cpu-levels", "host"}, "attnc verify: --cpu-levels applies to the cpu target; --gpu runs the GPU kernels, which have no CPU levels: drop --gpu to run"},
		{[]string{"verify", llama3, "--target", "hip", "--cpu-levels", "host"}, "use --target cpu, or drop --cpu-levels"},
		{[]string{"bench", llama3, "--seconds", "0"}, "--seconds must be in (0, 3600] (got 0)"},
		{[]string{"bench", "--seconds", "1e9"}, "--seconds must be in (0, 3600] (got 1e+09)"},
		{[]string{"bench", "--seconds", "NaN"}, "--seconds must be in (0, 3600]"},
		{[]string{"bench", llama3, "--batch", "-1"}, "--batch must be in 1..4096 (got -1)"},
		{[]string{"bench", "--threads", "5000"}, "--threads must be in 0..1024 (got 5000)"},
		{[]string{"bench", "--reps", "-2"}, "--reps must be in 0..100000 (got -2)"},
		{[]string{"bench", "--kv-len", "0"}, "--kv-len must be in 1..1048576 (got 0)"},
		{[]string{"bench", "--q-len", "100000"}, "--q-len must be in 1..65536 (got 100000)"},
		{[]string{"bench", "--head-dim", "0"}, "--head-dim 0 --page-size 16): head_dim must be positive, got 0"},
		{[]string{"bench", "--pool-mib", "0"}, "--pool-mib must be in 1..1048576 (got 0)"},
		{[]string{"bench", "--stream-mib", "-1"}, "--stream-mib must be in 0..1048576 (got -1)"},
		{[]string{"bench", llama3, "--qo-heads", "8"}, "--qo-heads shapes the built-in cases; with SPEC files the specs set it"},
		{[]string{"bench", llama3, "--decode", "f16"}, "--decode shapes the built-in cases"},
		{[]string{"bench", "--decode", "f64"}, `--decode: unknown dtype "f64"`},
		{[]string{"bench", "--prefill", "bf16/"}, `--prefill: empty kv dtype in "bf16/"`},
		{[]string{"bench", "--decode", "", "--prefill", ""}, "nothing to measure"},
		{[]string{"bench", "--gpu"}, "--gpu measures the variants of SPEC files; give at least one"},
		{[]string{"bench", llama3, "--gpu", "--json", "x.json"}, "--json is for the CPU bench"},
		{[]string{"verify", llama3, "--threads", "1,4000"}, "--threads 4000 is out of range: the kernels use at most this many threads, 1..1024"},
		{[]string{"verify", llama3, "--threads", "0"}, "--threads 0 is out of range"},
	} {
		_, e, code := runCLI(t, tc.args...)
		if code != 1 || !strings.Contains(e, tc.want) {
			t.Errorf("attnc %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tc.args, " "), code, e, tc.want)
		}
	}
}

// Without nvcc, --gpu fails before building anything and says why.
func TestGPUWithoutNVCC(t *testing.T) {
	if !cgoEnabled {
		t.Skip("built with CGO_ENABLED=0")
	}
	t.Setenv("ATTNC_NVCC", "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CUDA_HOME", t.TempDir())
	if _, err := os.Stat("/usr/local/cuda/bin/nvcc"); err == nil {
		t.Skip("nvcc is installed in /usr/local/cuda")
	}
	for _, args := range [][]string{
		{"verify", llama3, "--gpu"},
		{"verify", llama3, "--target", "cuda", "--gpu"},
		{"bench", llama3, "--target", "cuda", "--gpu"},
	} {
		o, e, code := runCLI(t, args...)
		if code != 1 || !strings.Contains(e, "--gpu: cuda: nvcc not found") || o != "" {
			t.Errorf("attnc %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, o, e)
		}
	}
}

// benchTiny are flags that make the CPU bench take seconds: small
// yardstick buffers and pool, a small shape, three repetitions.
var benchTiny = []string{"--stream-mib", "8", "--pool-mib", "4", "--batch", "2", "--kv-len", "100", "--q-len", "20",
	"--threads", "2", "--reps", "3"}

// The built-in cases on a tiny shape: the table and the JSON, with the
// in-run yardsticks and every ratio.
func TestBenchBuiltin(t *testing.T) {
	needTools(t, true)
	js := filepath.Join(t.TempDir(), "bench.json")
	args := append([]string{"bench", "--qo-heads", "4", "--kv-heads", "2", "--head-dim", "32", "--page-size", "4",
		"--decode", "f16,bf16/e4m3,f16/fp4", "--prefill", "f32", "--json", js, hostLevels()}, benchTiny...)
	o, e, code := runCLI(t, args...)
	if code != 0 || e != "" {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
	for _, re := range []string{
		`(?m)^attnc bench: .*, 2 threads of \d+ CPUs, LLC .*, load [\d.]+ [\d.]+ [\d.]+$`,
		`(?m)^kernels: CPU level \S+ \(.*\); yardsticks: -mcpu=\S+ \(.*\) and the lower levels with FMA; each row: 3 repetitions$`,
		`(?m)^stream read, 8 MiB contiguous +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +3  GB/s$`,
		`(?m)^  the same, prefetching 512 B ahead +[\d.]+ .* GB/s$`,
		`(?m)^stream read, 512 B blocks in random order +[\d.]+ .* GB/s$`,
		`(?m)^  the same, prefetching the next block +[\d.]+ .* GB/s$`,
		`(?m)^fp32 fma, \S+ \(.*\), \d+ chains +[\d.]+ .* GFLOP/s$`,
		`(?m)^fma peak: \S+, [\d.]+ GFLOP/s`,
		`(?m)^decode f16 +2x100 4/2 d32 p4 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +3 GB/s +[\d.]+ +[\d.]+ +[\d.]+  stream read \([\d.]+ scattered\+prefetch; first call after the scans [\d.]+ ms; huge pages (advised|not advised \([^)]*\)), THP \w+, \d+ (B|KiB|MiB) of AnonHugePages; multiply-adds at the fma peak [\d.]+ ms, [\d.]+ of the scan's time; paged scan [\d.]+ GB/s, (no prefetch|prefetch \d+ pages? ahead( into L2)?); pool 4 MiB, \d+ page sets\)$`,
		`(?m)^decode bf16/e4m3 +2x100 4/2 d32 p4 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +3 GB/s +[\d.]+ +[\d.]+ +[\d.]+  stream read \(`,
		`(?m)^skip decode f16/fp4: <bench decode f16/fp4>:\d+:\d+: unknown kv_dtype "fp4"`,
		`(?m)^prefill f32 +20 causal 4/2 d32 p4 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +3 GFLOP/s +[\d.]+ +[\d.]+ +-  fma peak \(`,
		`(?m)^load at the end: [\d.]+ [\d.]+ [\d.]+; 3 cases, 1 skipped, 0 failed$`,
	} {
		if !regexp.MustCompile(re).MatchString(o) {
			t.Errorf("bench output does not match %s:\n%s", re, o)
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Schema      string `json:"schema"`
		Threads     int    `json:"threads"`
		KernelLevel struct {
			MCPU string `json:"mcpu"`
		} `json:"kernel_level"`
		LoadStart [3]float64 `json:"load_start"`
		Machine   struct {
			OnlineCPUs int   `json:"online_cpus"`
			LLCBytes   int64 `json:"llc_bytes"`
		} `json:"machine"`
		Yard struct {
			StreamBytes int64 `json:"stream_bytes"`
			Read        struct {
				Seconds []float64 `json:"seconds"`
				Rate    struct{ Median float64 }
			} `json:"read"`
			FMA     []json.RawMessage `json:"fma"`
			Summary struct {
				Read    float64 `json:"stream_read_gbps"`
				FMAPeak float64 `json:"fma_peak_gflops"`
			} `json:"summary"`
		} `json:"yardsticks"`
		Cases []struct {
			Name    string             `json:"name"`
			Role    string             `json:"role"`
			KVBytes int64              `json:"kv_bytes"`
			Flops   float64            `json:"flops"`
			Ratio   float64            `json:"ratio"`
			Best    float64            `json:"ratio_best"`
			RatioTo string             `json:"ratio_to"`
			Ratios  map[string]float64 `json:"ratios"`
			Rate    struct {
				N      int
				Median float64
			} `json:"rate"`
			M struct {
				Seconds []float64 `json:"seconds"`
			} `json:"m"`
			FirstMS *struct{ N int } `json:"first_ms"`
		} `json:"cases"`
		Skipped []struct{ Name, Reason string } `json:"skipped"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if r.Schema != "attnc-bench/1" || r.Threads != 2 || r.KernelLevel.MCPU == "" || r.Machine.OnlineCPUs < 1 || r.Yard.StreamBytes != 8<<20 ||
		len(r.Yard.Read.Seconds) != 3 || r.Yard.Summary.Read <= 0 || r.Yard.Summary.Read != r.Yard.Read.Rate.Median || r.Yard.Summary.FMAPeak <= 0 || len(r.Yard.FMA) < 1 {
		t.Errorf("JSON header and yardsticks:\n%s", b)
	}
	if len(r.Cases) != 3 || len(r.Skipped) != 1 || r.Skipped[0].Name != "decode f16/fp4" {
		t.Fatalf("JSON cases:\n%s", b)
	}
	dec, dec8, pre := r.Cases[0], r.Cases[1], r.Cases[2]
	// The 8-bit cache's bytes as stored: one per element.
	if dec8.Name != "decode bf16/e4m3" || dec8.KVBytes != 2*100*2*64 || dec8.RatioTo != "stream_read" || dec8.Ratio <= 0 {
		t.Errorf("8-bit decode case: %+v", dec8)
	}
	// Decode reads 2 sequences x 100 rows x 2 KV heads x (32 + 32) f16.
	if dec.Name != "decode f16" || dec.RatioTo != "stream_read" || dec.KVBytes != 2*100*2*64*2 || dec.Rate.N != 3 || len(dec.M.Seconds) != 3 ||
		dec.Ratio <= 0 || dec.Ratios["stream_read"] != dec.Ratio || dec.Ratios["scattered_read_prefetch"] <= 0 || dec.Ratios["stream_read_prefetch"] <= 0 {
		t.Errorf("decode case: %+v", dec)
	}
	// Each round's first call is timed apart from the second (rate).
	if dec.FirstMS == nil || dec.FirstMS.N != 3 || pre.FirstMS != nil {
		t.Errorf("first calls: decode %+v, prefill %+v", dec.FirstMS, pre.FirstMS)
	}
	if dec.Best <= 0 || pre.Best <= 0 {
		t.Errorf("best ratios %v %v", dec.Best, pre.Best)
	}
	if got := dec.Rate.Median / r.Yard.Summary.Read; got/dec.Ratio < 1-1e-9 || got/dec.Ratio > 1+1e-9 {
		t.Errorf("decode ratio %v, rate/stream %v", dec.Ratio, got)
	}
	// Causal prefill: 2*2*d*L(L+1)/2*heads.
	if pre.Name != "prefill f32" || pre.RatioTo != "fma_peak" || pre.Flops != 2*2*32*20*21/2*4 || pre.Ratio <= 0 || pre.Ratios["fma_peak"] != pre.Ratio {
		t.Errorf("prefill case: %+v", pre)
	}
	if got := pre.Rate.Median / r.Yard.Summary.FMAPeak; got/pre.Ratio < 1-1e-9 || got/pre.Ratio > 1+1e-9 {
		t.Errorf("prefill ratio %v, rate/peak %v", pre.Ratio, got)
	}
}

// With SPEC files, their variants' entries are the cases; unsupported
// variants are skipped.
func TestBenchSpecs(t *testing.T) {
	needTools(t, true)
	bad := unsupported(t)
	p := writeSpec(t, "small.attn", smallSpec)
	work := filepath.Join(t.TempDir(), "work")
	o, e, code := runCLI(t, append([]string{"bench", p, bad, "--work-dir", work, hostLevels()}, benchTiny...)...)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
	// --work-dir keeps the kernels and the yardsticks, for a profiler.
	for _, pat := range []string{"*-small/small.so", "yardsticks/yardstick-*.so"} {
		if m, _ := filepath.Glob(filepath.Join(work, pat)); len(m) == 0 {
			t.Errorf("--work-dir has no %s", pat)
		}
	}
	for _, re := range []string{
		`(?m)^small decode +2x100 4/2 d64 p4 .* GB/s +[\d.]+ +[\d.]+ +[\d.]+  stream read `,
		`(?m)^small prefill +20 causal 4/2 d64 p4 .* GFLOP/s +[\d.]+ +[\d.]+ +-  fma peak `,
		`(?m)^skip mla_rope decode: .*not supported yet`,
		`(?m)^skip mla_rope prefill: .*not supported yet`,
		`(?m)^load at the end: .*; 2 cases, 2 skipped, 0 failed$`,
	} {
		if !regexp.MustCompile(re).MatchString(o) {
			t.Errorf("bench output does not match %s:\n%s", re, o)
		}
	}
}

// hostLevels is the --cpu-levels flag of the tests whose point is not
// the CPU levels: the clones of the level this machine's entries run only
// (host, or the one $ATTNC_CPU_LEVEL forces), one opt and llc compile of
// each work kernel instead of three or four. The levels have tests of
// their own (TestBuildCPULevels here; conformance's TestKernelMatrix,
// TestCPULevelsBuild).
func hostLevels() string {
	if l := os.Getenv(cpu.LevelEnv); l != "" {
		return "--cpu-levels=" + l
	}
	return "--cpu-levels=" + cpu.HostLevel
}

// TestBuildCPULevels: --cpu-levels restricts the clones to the levels
// named (any order, host resolved), which the manifest lists and the
// kernels' levels show; without it every level is cloned. An unknown
// level, an empty list and --cpu-levels without the cpu target are
// errors.
func TestBuildCPULevels(t *testing.T) {
	p := writeSpec(t, "small.attn", smallSpec)
	levels := func(args ...string) (built, clones []string) {
		t.Helper()
		dir := t.TempDir()
		mustRun(t, append([]string{"build", p, "-o", dir}, args...)...)
		b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m registry.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range m.Kernels {
			if k.Level != "" && !slices.Contains(clones, k.Level) {
				clones = append(clones, k.Level)
			}
		}
		return m.Targets["cpu"].Levels, clones
	}
	all := []string{"x86-64", "x86-64-v3", "x86-64-v4", "x86-64-v4-bf16", "x86-64-amx"}
	if built, clones := levels(); !slices.Equal(built, all) || !slices.Equal(clones, all[:3]) {
		t.Errorf("every level: manifest levels %v, clones at %v", built, clones)
	}
	if built, clones := levels("--cpu-levels", "x86-64-v4,x86-64"); !slices.Equal(built, []string{"x86-64", "x86-64-v4"}) || !slices.Equal(clones, built) {
		t.Errorf("--cpu-levels x86-64-v4,x86-64: manifest levels %v, clones at %v", built, clones)
	}
	// small is f16: no bf16 product, so its kernels take x86-64-v4 at
	// x86-64-v4-bf16.
	if built, clones := levels("--cpu-levels=x86-64-v4-bf16"); !slices.Equal(built, []string{"x86-64-v4-bf16"}) || !slices.Equal(clones, []string{"x86-64-v4"}) {
		t.Errorf("--cpu-levels x86-64-v4-bf16: manifest levels %v, clones at %v", built, clones)
	}
	if runtime.GOARCH == "amd64" {
		if built, clones := levels("--cpu-levels=host"); len(built) != 1 || len(clones) != 1 {
			t.Errorf("--cpu-levels host: manifest levels %v, clones at %v", built, clones)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cpu-levels", "x86-64-v9"}, `attnc build: --cpu-levels: unknown CPU level "x86-64-v9" for x86_64-unknown-linux-gnu (known: x86-64, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-amx, host)`},
		{[]string{"--cpu-levels", "neon"}, `unknown CPU level "neon" for x86_64-unknown-linux-gnu`},
		{[]string{"--cpu-levels", "x86-64", "--triple", "aarch64-unknown-linux-gnu"}, `unknown CPU level "x86-64" for aarch64-unknown-linux-gnu (known: neon, host)`},
		{[]string{"--cpu-levels", ""}, "attnc build: --cpu-levels: no CPU level given"},
		{[]string{"--cpu-levels", "host", "--target", "cuda"}, "attnc build: --cpu-levels applies to the cpu target; add cpu to --target"},
	} {
		_, e, code := runCLI(t, append([]string{"build", p, "-o", t.TempDir()}, c.args...)...)
		if code != 1 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, e, c.want)
		}
	}
	// verify and bench take the flag too, checked before any build.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", p, "--cpu-levels", "x86-64-v9"}, `attnc verify: --cpu-levels: unknown CPU level "x86-64-v9"`},
		{[]string{"verify", p, "--target", "cuda", "--cpu-levels", "host"}, "attnc verify: --cpu-levels applies to the cpu target"},
		{[]string{"bench", p, "--cpu-levels", ""}, "attnc bench: --cpu-levels: no CPU level given"},
	} {
		_, e, code := runCLI(t, c.args...)
		if code != 1 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, e, c.want)
		}
	}
}

func TestBuildShared(t *testing.T) {
	needTools(t, false)
	p := writeSpec(t, "small.attn", smallSpec)
	dir := t.TempDir()
	o, _ := mustRun(t, "build", p, "-o", dir, "--shared", hostLevels())
	if !strings.Contains(o, filepath.Join(dir, "small.so")) {
		t.Errorf("build --shared did not report small.so:\n%s", o)
	}
	if st, err := os.Stat(filepath.Join(dir, "small.so")); err != nil || st.Size() == 0 {
		t.Errorf("build --shared: %v", err)
	}
}

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cli -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test ./cli -update and review the diff):\n%s", path, got)
	}
}

// TestGolden pins the pass listing and the help texts a user reads.
func TestGolden(t *testing.T) {
	o, _ := mustRun(t, "passes")
	golden(t, "passes.golden", o)
	var help strings.Builder
	for _, cmd := range []string{"", "bench", "build", "check", "explain", "passes", "sass", "verify", "version"} {
		args := []string{"--help"}
		if cmd != "" {
			args = []string{cmd, "--help"}
		}
		o, _ := mustRun(t, args...)
		help.WriteString("$ attnc " + strings.Join(args, " ") + "\n" + o + "\n")
	}
	// The target list grows with the backends; keep it out of the golden file.
	r := strings.NewReplacer("(known: "+knownTargets()+")", "(known: TARGETS)",
		"to verify: "+orList(harnessed()), "to verify: TARGETS", "--target "+strings.Join(harnessed(), "|")+"]", "--target TARGETS]",
		"to measure: "+orList(benchTargets()), "to measure: TARGETS")
	golden(t, "help.golden", r.Replace(help.String()))
}

// TestWithPasses runs the command line with a user pass: passes lists it in
// place, build --print-after accepts its name and the manifest records it,
// check compiles with it; a malformed insertion fails every command.
func TestWithPasses(t *testing.T) {
	mark := attnc.Insertion{After: "simplify", Pass: passes.Pass{Name: "mark", Desc: "a user pass that changes nothing",
		Run: func(m *ir.Module) (*ir.Module, error) { return m, nil }}}
	run := func(opt Option, args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := Run(args, &o, &e, opt)
		return o.String(), e.String(), code
	}
	o, _, code := run(WithPasses(mark), "passes")
	if code != 0 || !regexp.MustCompile(`(?m)^2\s+simplify .*\n3\s+mark\s+optional\s+a user pass that changes nothing\n4\s+classify-tiles`).MatchString(o) {
		t.Errorf("passes with a user pass (exit %d):\n%s", code, o)
	}
	dir := t.TempDir()
	_, e, code := run(WithPasses(mark), "build", llama3, "--target", "cpu,cuda", "-o", dir, "--print-after=mark")
	if code != 0 || !strings.Contains(e, "// --- after mark (cpu) ---") || !strings.Contains(e, "// --- after mark (cuda) ---") {
		t.Errorf("build --print-after=mark (exit %d) printed %d modules, want 2 (cpu and cuda):\n%.300s", code, strings.Count(e, "// --- after mark "), e)
	}
	var man struct {
		Targets map[string]struct{ Passes []string } `json:"targets"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "manifest.json")); err != nil || json.Unmarshal(b, &man) != nil {
		t.Fatalf("manifest: %v", err)
	}
	for _, target := range []string{"cpu", "cuda"} {
		if p := man.Targets[target].Passes; len(p) < 3 || p[2] != "mark" {
			t.Errorf("manifest targets.%s.passes = %v, want mark third", target, p)
		}
	}
	if o, e, code := run(WithPasses(mark), "check", llama3); code != 0 || o != "ok llama3_8b\n" {
		t.Errorf("check: exit %d\n%s%s", code, o, e)
	}
	_, e, code = runCLI(t, "build", llama3, "-o", dir, "--print-after=mark")
	if code != 1 || !strings.Contains(e, `no pass named "mark"`) {
		t.Errorf("plain attnc accepted --print-after=mark: exit %d, %s", code, e)
	}
	// explain selects from the modules after every pass: a pass that
	// rewrites @plan_splits to 1 removes the split.
	noSplit := attnc.Insertion{Before: "inline-defs", Pass: passes.Pass{Name: "no-split", Desc: "never split decode",
		Run: func(m *ir.Module) (*ir.Module, error) {
			d := m.Def("plan_splits")
			return m.WithDef(&ir.Def{Name: d.Name, Params: d.Params, Body: ir.Int(1)}), nil
		}}}
	shape := []string{"explain", llama3, "--batch", "1", "--kv-len", "4096", "--threads", "16"}
	if o, _ := mustRun(t, shape...); !strings.Contains(o, "KV split in 16 chunks") {
		t.Errorf("explain without the pass does not split:\n%s", o)
	}
	if o, e, code := run(WithPasses(noSplit), shape...); code != 0 || strings.Contains(o, "KV split") || !strings.Contains(o, "-> decode via llama3_8b_decode") {
		t.Errorf("explain with a pass that disables splits (exit %d):\n%s%s", code, o, e)
	}
	bad := attnc.Insertion{Before: "inline-def", Pass: mark.Pass}
	for _, args := range [][]string{{"passes"}, {"build", llama3, "-o", dir}} {
		_, e, code := run(WithPasses(bad), args...)
		if code != 1 || !strings.Contains(e, `no target's pass table has a pass named "inline-def"`) {
			t.Errorf("%v with a bad insertion: exit %d, %s", args, code, e)
		}
	}
}

// TestCustomBinary builds examples/custompass, the README's custom attnc,
// and checks that its pass is listed, printable and recorded.
func TestCustomBinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	needtool.Check(t, err)
	bin := filepath.Join(t.TempDir(), "custompass")
	if out, err := exec.Command(gobin, "build", "-o", bin, "../examples/custompass").CombinedOutput(); err != nil {
		t.Fatalf("go build ../examples/custompass: %v\n%s", err, out)
	}
	run := func(args ...string) (string, string) {
		cmd := exec.Command(bin, args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("custompass %s: %v\n%s", strings.Join(args, " "), err, e.String())
		}
		return o.String(), e.String()
	}
	o, _ := run("passes")
	if !regexp.MustCompile(`(?m)^1\s+local-1024\s+optional\s+narrow every mask.*\n2\s+inline-defs`).MatchString(o) {
		t.Errorf("custompass passes does not list local-1024 first:\n%s", o)
	}
	dir := t.TempDir()
	_, e := run("build", llama3, "-o", dir, "--print-after=local-1024")
	if !strings.Contains(e, "// --- after local-1024 (cpu) ---") ||
		!strings.Contains(e, "def mask(q_pos: i32, kv_pos: i32, head: i32, batch: i32): bool = ((kv_pos <= q_pos) & ((q_pos - kv_pos) < 1024))") {
		t.Errorf("--print-after=local-1024 does not show the narrowed mask:\n%.600s", e)
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"local-1024"`) {
		t.Error("the manifest does not record local-1024")
	}
}

// TestResourceLimits: numeric flags are bounded to what the ABI represents
// (the bound in the error), a batch of 2^31-1 is explained without listing
// its sequences, and specs are read through a bounded reader.
func TestResourceLimits(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"explain", llama3, "--batch", "3000000000", "--kv-len", "4096"}, 1, "attnc explain: --batch 3000000000 is out of range: batch_size is an int32_t, 0..2147483647"},
		{[]string{"explain", llama3, "--kv-len", "99999999999"}, 1, "attnc explain: --kv-len 99999999999 is out of range: a sequence holds at most 2^30 tokens, 0..1073741824"},
		{[]string{"explain", llama3, "--kv-len", "100", "--q-len", "1073741825"}, 1, "--q-len 1073741825 is out of range"},
		{[]string{"explain", llama3, "--kv-len", "100", "--threads", "0"}, 1, "--threads 0 is out of range: the kernels use at most this many threads, 1..1024"},
		{[]string{"explain", llama3, "--kv-len", "100", "--q-len", "2", "--batch", "2147483647"}, 1, "the batch has 4294967294 query tokens; qo_indptr is int32_t and holds at most 2147483647"},
		{[]string{"check", "/dev/zero"}, 1, "attnc check: /dev/zero: not a regular file (a character device); a spec is read from a regular file"},
	} {
		_, e, code := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("attnc %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, e, tc.code, tc.want)
		}
	}
	o, e, code := runCLI(t, "explain", llama3, "--batch", "2147483647", "--kv-len", "4096", "--threads", "8")
	if want := "batch=2147483647 q_len=1 kv_len=4096 threads=8 -> decode via llama3_8b_decode: status -13 TOO_LARGE"; code != 0 || !strings.Contains(o, want) {
		t.Errorf("explain of a 2^31-1 batch: exit %d, stderr %q, stdout:\n%s\nwant %q", code, e, o, want)
	}
	o, _, _ = runCLI(t, "explain", llama3, "--batch", "1000", "--kv-len", "4096", "--threads", "8")
	if want := "batch=1000 q_len=1 kv_len=4096 threads=8 -> decode via llama3_8b_decode, 8000 work items"; !strings.Contains(o, want) {
		t.Errorf("explain of a 1000 batch:\n%s\nwant %q", o, want)
	}
	// A UTF-8 BOM is accepted; names are bounded and unique ignoring case.
	bom := writeSpec(t, "bom.attn", "\xef\xbb\xbfvariant bom {\n  heads qo = 4\n  head_dim 64\n}\n")
	if o, e, code := runCLI(t, "check", bom); code != 0 || o != "ok bom\n" {
		t.Errorf("check of a spec with a BOM: exit %d, stdout %q, stderr %q", code, o, e)
	}
	long := writeSpec(t, "long.attn", "variant "+strings.Repeat("x", 10000)+" {\n  heads qo = 4\n  head_dim 64\n}\n")
	if _, e, code := runCLI(t, "check", long); code != 1 || !strings.Contains(e, long+":1:9: variant name is 10000 characters long; the limit is 64") {
		t.Errorf("check of a 10000-character name: exit %d, stderr %q", code, e)
	}
	upper := writeSpec(t, "upper.attn", "variant Foo {\n  heads qo = 4\n  head_dim 64\n}\n")
	lowerSpec := writeSpec(t, "lower.attn", "variant foo {\n  heads qo = 4\n  head_dim 64\n}\n")
	if _, e, code := runCLI(t, "build", upper, lowerSpec, "-o", t.TempDir()); code != 1 || !strings.Contains(e, lowerSpec+":1:1: variant foo collides with Foo (defined at "+upper+":1:1)") {
		t.Errorf("build of Foo and foo: exit %d, stderr %q", code, e)
	}
}

const smallBF16Spec = `variant smallbf {
  heads qo = 4, kv = 2
  head_dim 64
  dtype bf16
  cache paged(page_size = 4)
  mask causal
}
`

// TestVerifyPrintsBound: verify's half-precision lines print the bound
// they applied and how much of it each case used, at most 1 when it passes.
func TestVerifyPrintsBound(t *testing.T) {
	needTools(t, true)
	p := writeSpec(t, "smallbf.attn", smallBF16Spec)
	o, e, code := runCLI(t, "verify", p, "--threads", "1", "--seed", "3", hostLevels())
	if code != 0 {
		t.Fatalf("verify: exit %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
	re := regexp.MustCompile(`(?m)^PASS \S+\s+.*max_err=([0-9.]+)ulp bound=0\.5ulp\+2\^-20\*mag allowance_used=([0-9.]+) `)
	ms := re.FindAllStringSubmatch(o, -1)
	if len(ms) == 0 {
		t.Fatalf("no PASS line prints its bound:\n%s", o)
	}
	for _, m := range ms {
		if r, _ := strconv.ParseFloat(m[2], 64); r > 1 {
			t.Errorf("a passing case prints allowance_used=%s > 1: %s", m[2], m[0])
		}
	}
	if strings.Contains(o, "tol=0.5ulp") {
		t.Errorf("verify still prints tol=0.5ulp:\n%s", o)
	}
}

// TestVerifyUserPasses: with user passes, verify says the reference does
// not include them, and marks and lists the cases they change (and only
// those).
func TestVerifyUserPasses(t *testing.T) {
	needTools(t, true)
	p := writeSpec(t, "small.attn", smallSpec)
	run := func(pass passes.Pass) (string, int) {
		var o, e bytes.Buffer
		code := Run([]string{"verify", p, "--threads", "1", "--seed", "3", hostLevels()}, &o, &e,
			WithPasses(attnc.Insertion{Before: "inline-defs", Pass: pass}))
		return o.String() + e.String(), code
	}
	local := passes.Pass{Name: "local-4", Desc: "narrow the mask to q_pos - kv_pos < 4",
		Run: func(m *ir.Module) (*ir.Module, error) {
			d := m.Def("mask")
			near := ir.Bin(ir.Lt, ir.Bin(ir.Sub, ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32)), ir.Int(4))
			return m.WithDef(&ir.Def{Name: d.Name, Params: d.Params, Body: ir.Bin(ir.And, d.Body, near)}), nil
		}}
	o, _ := run(local)
	if !strings.Contains(o, "note: these kernels include the user passes local-4; the reference computes the spec without them") {
		t.Errorf("verify with a user pass does not say the reference lacks it:\n%s", o)
	}
	m := regexp.MustCompile(`(?m)^small: the user passes change the outputs of (\d+) of (\d+) cases`).FindStringSubmatch(o)
	if m == nil {
		t.Fatalf("verify does not list the cases local-4 changes:\n%s", o)
	}
	marked := strings.Count(o, "[changed by the user passes]")
	if n, _ := strconv.Atoi(m[1]); n == 0 || n != marked {
		t.Errorf("%s cases listed as changed, %d marked:\n%s", m[1], marked, o)
	}
	// The cases the pass leaves alone (queries that reach back fewer than
	// 4 positions) are not marked.
	if cases := regexp.MustCompile(`(?m)^(PASS|FAIL) small_`).FindAllString(o, -1); len(cases) <= marked {
		t.Errorf("every one of %d cases is marked as changed by local-4:\n%s", len(cases), o)
	}
}

// TestUserPassSummary: after a variant's cases verify says which ones the
// user passes changed, or that they changed none and so went unchecked.
func TestUserPassSummary(t *testing.T) {
	if got, want := userPassSummary("v", nil, 12), "v: the user passes change no output of these 12 cases (identical to the kernels without them), so none of them checks what the passes do\n"; got != want {
		t.Errorf("no change: %q, want %q", got, want)
	}
	got := userPassSummary("v", []string{"v_prefill long threads=1", "v_decode split threads=1"}, 12)
	want := "v: the user passes change the outputs of 2 of 12 cases; the reference does not include the passes, so these are compared with attention without them:\n" +
		"  v_prefill long threads=1\n  v_decode split threads=1\n"
	if got != want {
		t.Errorf("two changed: %q, want %q", got, want)
	}
}

// TestBuildDepfile: --depfile writes make-format dependencies of every
// file written on every spec given (paths escaped as gcc -MD does), and
// make reads it: an output is out of date after its spec changes and
// current otherwise; a deleted spec does not stop make.
func TestBuildDepfile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my out")
	spec := writeSpec(t, "small.attn", smallSpec)
	dep := filepath.Join(t.TempDir(), "kernels.d")
	mustRun(t, "build", llama3, spec, "--target", "cpu,cuda", "-o", dir, "--depfile", dep)
	got, err := os.ReadFile(dep)
	if err != nil {
		t.Fatal(err)
	}
	esc := strings.ReplaceAll(dir, " ", `\ `)
	var outs []string
	for _, f := range []string{"llama3_8b.cu", "llama3_8b.h", "llama3_8b.ll", "manifest.json", "small.cu", "small.h", "small.ll"} {
		outs = append(outs, esc+"/"+f)
	}
	want := strings.Join(outs, " \\\n ") + ": \\\n  " + llama3 + " \\\n  " + spec + "\n\n" + llama3 + ":\n\n" + spec + ":\n"
	if string(got) != want {
		t.Fatalf("depfile:\n%s\nwant:\n%s", got, want)
	}
	makePath, err := exec.LookPath("make")
	needtool.Check(t, err)
	target := dir + "/small.ll"
	mk := filepath.Join(t.TempDir(), "Makefile")
	rule := "include " + dep + "\n" + strings.ReplaceAll(target, " ", `\ `) + ":\n\ttrue\n"
	if err := os.WriteFile(mk, []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	makeQ := func() int {
		cmd := exec.Command(makePath, "-q", "-f", mk, target)
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			t.Fatal(err)
		}
		return 0
	}
	if c := makeQ(); c != 0 {
		t.Errorf("make -q %s after the build: exit %d, want 0 (up to date)", target, c)
	}
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(spec, later, later); err != nil {
		t.Fatal(err)
	}
	if c := makeQ(); c != 1 {
		t.Errorf("make -q %s after touching %s: exit %d, want 1 (out of date)", target, spec, c)
	}
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	if c := makeQ(); c != 1 {
		t.Errorf("make -q %s after deleting %s: exit %d, want 1 (out of date, not an error)", target, spec, c)
	}
}

// TestVersionFromBuildInfo: version prints the module version the go
// command records (go install ...@vX.Y.Z), the version a custom attnc's
// go.mod requires, and "(devel)" when none is recorded.
func TestVersionFromBuildInfo(t *testing.T) {
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/attnc/attnc", Version: "v0.3.1"}}, "v0.3.1"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/attnc/attnc", Version: "(devel)"}}, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Path: "example.com/mycc", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "github.com/attnc/attnc", Version: "v0.4.0"}}}, "v0.4.0"},
		{nil, "(devel)"},
	} {
		if got := moduleVersion(c.bi, c.bi != nil); got != c.want {
			t.Errorf("moduleVersion(%+v) = %q, want %q", c.bi, got, c.want)
		}
	}
}

// TestVersionOfBuiltBinary: a built attnc prints the main module version
// that `go version -m` reads from the same binary.
func TestVersionOfBuiltBinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	needtool.Check(t, err)
	bin := filepath.Join(t.TempDir(), "attnc")
	if out, err := exec.Command(gobin, "build", "-o", bin, "../cmd/attnc").CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/attnc: %v\n%s", err, out)
	}
	info, err := exec.Command(gobin, "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	m := regexp.MustCompile(`(?m)^\s+mod\s+github\.com/attnc/attnc\s+(\S+)`).FindSubmatch(info)
	if m == nil {
		t.Fatalf("go version -m names no main module:\n%s", info)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "attnc " + string(m[1]) + " (artifact ABI 1,"; !strings.HasPrefix(string(out), want) {
		t.Errorf("attnc version = %q, want prefix %q", out, want)
	}
}
