package attnc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/targets"
)

// The compile-time budget of any spec within the frontend's limits: check
// in under 5 s, build (cpu and cuda) in under 10 s of CPU time on an idle
// core of this project's Zen 5 VMs, under 1 GiB of memory, every .ll
// under 64 MiB. The time budgets are not held as times: CPU time is not
// the machine's constant (with go test ./... running packages on both of
// a VM's vCPUs the largest builds took 20-40% more of it, 8.3-9.3 s alone
// and 10.2-12 s in CI, while an ordinary build beside them slowed by only
// 3%: the big builds' collector suffers most from a neighbour's memory
// traffic). So a spec's check and build are held to a multiple of the CPU
// time of an ordinary build (refSpec) measured in a child right before,
// the multiples about twice the worst specs' ratios on the idle reference
// machine (check 4.2-6.6, build 11-16 times one build of llama3_8b,
// 0.52-0.68 s): a spec that costs twice its share against an ordinary one
// fails, however fast or busy the machine. Memory and output size are
// held as they are.
const (
	checkBudget = 5 * time.Second // a located error past a limit: at once
	checkRatio  = 14
	buildRatio  = 32
	memBudget   = 1 << 30
	llBudget    = 64 << 20
	specMaxSize = 256 << 10 // frontend's maxSize
	refSpec     = "examples/llama3_8b.attn"
	refBuilds   = 3
)

// referenceBuild is the CPU time of one build of refSpec for cpu and
// cuda, now: refBuilds of them in a child, averaged.
func referenceBuild(t *testing.T, dir string) time.Duration {
	t.Helper()
	cpu, _, _, _ := childUsage(t, "reference", refSpec, filepath.Join(dir, "reference.out"))
	return cpu / refBuilds
}

// boundsExpr builds a mask (bool) or score (number) expression of kind
// with at most ops operators and calls, nested at most 99 parentheses deep.
func boundsExpr(kind string, ops int) string {
	var b strings.Builder
	nest := func(levels int, open, close string) string {
		return strings.Repeat(open, levels) + "kv_pos" + strings.Repeat(close, levels)
	}
	switch kind {
	case "flat": // kv_pos <= q_pos && kv_pos != 0 && ...: 2 operators a clause
		b.WriteString("kv_pos <= q_pos")
		for i := 0; i < (ops-1)/2; i++ {
			fmt.Fprintf(&b, " &&\n    kv_pos != %d", i)
		}
		return b.String()
	case "cmp": // clauses of < - || == &&: 5 operators each
		b.WriteString("kv_pos <= q_pos")
		for i := 0; i < (ops-1)/5; i++ {
			fmt.Fprintf(&b, " && (q_pos - kv_pos < %d || head == %d)", i+5, i)
		}
		return b.String()
	case "abs": // abs(abs(kv_pos - 1 - 2) - 1 - 2) ...: 3 per level
		return nest((ops-1)/3, "abs(", " - 1 - 2)") + " <= q_pos"
	case "minmax":
		e := "kv_pos"
		for i := 0; i < (ops-1)/3; i++ {
			e = fmt.Sprintf("%s(%s, q_pos + %d)", []string{"min", "max"}[i%2], e, i)
		}
		return e + " <= q_pos"
	case "muldiv":
		return nest((ops-1)/3, "(", " * 3 / 2 % 1000)") + " <= q_pos"
	case "neg": // -(-(kv_pos + 1) + 1) ...: 2 per level
		return nest(min((ops-1)/2, 95), "-(", " + 1)") + " <= q_pos"
	case "not":
		return strings.Repeat("!", 99) + "(kv_pos <= q_pos)"
	case "softcap": // score
		e := "score"
		for i := 0; i < ops/3; i++ {
			e = fmt.Sprintf("softcap(%s + 1.0 - q_pos, 30.0)", e)
		}
		return e
	case "math": // score: tanh(exp(log(sqrt(abs(... * 0.5 + 0.25)))))
		e := "score"
		fs := []string{"tanh", "exp", "log", "sqrt", "abs"}
		for i := 0; i < ops/3; i++ {
			e = fmt.Sprintf("%s(%s * 0.5 + 0.25)", fs[i%len(fs)], e)
		}
		return e
	case "alibi": // score - alibi_slope(head + i) * (q_pos - kv_pos) ...: 5 each
		b.WriteString("score")
		for i := 0; i < ops/5; i++ {
			fmt.Fprintf(&b, " - alibi_slope(head + %d) * (q_pos - kv_pos)", i)
		}
		return b.String()
	}
	panic(kind)
}

// boundsVariant is a variant with every kernel, a wide shape and the given
// mask and score expressions ("" leaves the default).
func boundsVariant(name, mask, score string) string {
	s := "variant " + name + " {\n  heads qo = 32, kv = 8\n  head_dim 128\n  dtype bf16\n"
	if mask != "" {
		s += "  mask expr(" + mask + ")\n"
	}
	if score != "" {
		s += "  score " + score + "\n"
	}
	return s + "  kernels prefill, decode, merge_state, append, copy_page\n}\n"
}

// boundsSpecs are the worst specs within the limits: the most variants
// with the largest expressions, padded to the largest spec; and every kind
// of operator nested as deep, and used as often, as the limits allow.
func boundsSpecs(t *testing.T) map[string]string {
	if frontend.MaxVariants < 8 {
		t.Fatalf("the specs below assume 8 variants fit")
	}
	ops := frontend.MaxExprOps
	var longest strings.Builder
	for i := range frontend.MaxVariants {
		mask := []string{"flat", "cmp"}[i%2]
		score := []string{"math", "alibi"}[i%2]
		longest.WriteString(boundsVariant(fmt.Sprintf("v%d", i), boundsExpr(mask, ops), boundsExpr(score, ops)))
	}
	for i := 0; longest.Len() < specMaxSize-100; i++ {
		fmt.Fprintf(&longest, "// padding to the largest spec %08d\n", i)
	}
	var nested strings.Builder
	kinds := [][2]string{{"abs", "softcap"}, {"minmax", "math"}, {"muldiv", ""}, {"neg", ""}, {"not", ""}, {"flat", "softcap"}, {"cmp", "alibi"}, {"abs", "math"}}
	for i, k := range kinds[:min(len(kinds), frontend.MaxVariants)] {
		score := ""
		if k[1] != "" {
			score = boundsExpr(k[1], ops)
		}
		nested.WriteString(boundsVariant(fmt.Sprintf("n%d_%s", i, k[0]), boundsExpr(k[0], ops), score))
	}
	// The most tokens: operands in parentheses as deep as allowed (the
	// parser's slowest input per byte).
	var tokens strings.Builder
	wrap := func(x string) string { return strings.Repeat("(", 97) + x + strings.Repeat(")", 97) }
	perClause := 2*(2*97+1) + 2 // two wrapped operands, <= and &&
	clauses := (frontend.MaxTokens - 40*frontend.MaxVariants) / perClause / frontend.MaxVariants
	for i := range frontend.MaxVariants {
		var mask []string
		for range clauses {
			mask = append(mask, wrap("kv_pos")+" <= "+wrap("q_pos"))
		}
		tokens.WriteString(boundsVariant(fmt.Sprintf("t%d", i), strings.Join(mask, " &&\n    "), ""))
	}
	return map[string]string{"longest": longest.String(), "nested": nested.String(), "tokens": tokens.String()}
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childUsage runs this test binary's TestBoundsChild in mode on spec and
// returns its CPU time and peak resident memory.
func childUsage(t *testing.T, mode, spec, out string) (cpu, wall time.Duration, rss int64, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBoundsChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ATTNC_BOUNDS_MODE="+mode, "ATTNC_BOUNDS_SPEC="+spec, "ATTNC_BOUNDS_OUT="+out)
	var errb strings.Builder
	cmd.Stdout, cmd.Stderr = &errb, &errb
	start := time.Now()
	err := cmd.Run()
	wall = time.Since(start)
	if cmd.ProcessState != nil {
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		rss = ru.Maxrss << 10
	}
	if err != nil {
		t.Fatalf("%s %s: %v (cpu %v, wall %v, peak %d MiB)\n%s", mode, spec, err, cpu, wall, rss>>20, errb.String())
	}
	return cpu, wall, rss, errb.String()
}

// TestBoundsChild is the child of TestCompileBounded: it checks or builds
// one spec, as `attnc check` and `attnc build --target cpu,cuda` do, or
// builds the reference spec refBuilds times (referenceBuild).
func TestBoundsChild(t *testing.T) {
	mode, spec, out := os.Getenv("ATTNC_BOUNDS_MODE"), os.Getenv("ATTNC_BOUNDS_SPEC"), os.Getenv("ATTNC_BOUNDS_OUT")
	if mode == "" {
		t.Skip("run by TestCompileBounded")
	}
	// The collector's setting the attnc command builds under.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(CommandGCPercent)
	}
	// A regression must fail the test, not the machine.
	lim := syscall.Rlimit{Cur: 4 << 30, Max: 4 << 30}
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		t.Logf("setrlimit: %v", err)
	}
	switch mode {
	case "check":
		vs, err := frontend.ParseFile(spec)
		if err != nil {
			fmt.Println("ERROR:", err)
			return
		}
		for _, v := range vs {
			if err := lower.Unsupported(v); err != nil {
				t.Fatal(err)
			}
			for _, tg := range targets.All() {
				if _, err := driver.Compile(v, tg, driver.Options{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	case "build", "reference":
		n := 1
		if mode == "reference" {
			n = refBuilds
		}
		for range n {
			r, err := CompileFiles([]string{spec}, Options{Targets: []string{"cpu", "cuda"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Write(out, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCompileBounded holds the worst specs within the frontend's limits to
// the compile-time budget (time, memory, output size), and checks that
// specs just past each limit fail fast with a located error.
func TestCompileBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short, or the race detector (which slows the compiler several times)")
	}
	dir := t.TempDir()
	specs := boundsSpecs(t)
	t.Run("within", func(t *testing.T) {
		for _, name := range []string{"nested", "longest", "tokens"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				withinBudget(t, dir, name, specs[name])
			})
		}
	})

	// One step past each limit: a located error, at once.
	hugeMask := boundsExpr("flat", 40000)
	hugeMask = hugeMask[:strings.LastIndex(hugeMask[:specMaxSize-300], " &&")]
	over := map[string]struct{ src, want string }{
		"variants": {func() string {
			var b strings.Builder
			for i := range frontend.MaxVariants + 1 {
				b.WriteString(boundsVariant(fmt.Sprintf("v%d", i), "", ""))
			}
			return b.String()
		}(), fmt.Sprintf("over.attn:%d:9: more than %d variants in one spec", 6*frontend.MaxVariants+1, frontend.MaxVariants)},
		"mask ops":      {boundsVariant("v", boundsExpr("flat", frontend.MaxExprOps+2), ""), "mask expression has more than 256 operators"},
		"score ops":     {boundsVariant("v", "", boundsExpr("alibi", frontend.MaxExprOps+5)), "score expression has more than 256 operators"},
		"nesting":       {boundsVariant("v", strings.Repeat("abs(", 100)+"kv_pos"+strings.Repeat(")", 100)+" <= q_pos", ""), "expression nested too deeply"},
		"one huge mask": {boundsVariant("v", hugeMask, ""), "spec has more than 32768 tokens"},
		"tokens":        {boundsVariant("v", strings.Repeat("(kv_pos) + ", frontend.MaxTokens/4)+"0 <= q_pos", ""), "spec has more than 32768 tokens"},
	}
	for name, c := range over {
		start := cpuTime()
		_, err := frontend.Parse("over.attn", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "over.attn:") {
			t.Errorf("%s: got %v, want a located error with %q", name, err, c.want)
		}
		if d := cpuTime() - start; d > checkBudget {
			t.Errorf("%s: the error took %v", name, d)
		}
	}
}

// withinBudget checks and builds the spec src (named name) in child
// processes and holds them to the budget.
func withinBudget(t *testing.T, dir, name, src string) {
	path := filepath.Join(dir, name+".attn")
	if len(src) > specMaxSize {
		t.Fatalf("%s: %d bytes is over the limit", name, len(src))
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := frontend.Parse(path, []byte(src)); err != nil {
		t.Fatalf("%s is not within the limits: %v", name, err)
	}
	ref := referenceBuild(t, dir)
	cpu, wall, rss, _ := childUsage(t, "check", path, "")
	t.Logf("%s (%d bytes): check cpu %v wall %v peak %d MiB; %.1f ordinary builds (%v each)", name, len(src),
		cpu.Round(time.Millisecond), wall.Round(time.Millisecond), rss>>20, float64(cpu)/float64(ref), ref.Round(time.Millisecond))
	if cpu > checkRatio*ref || rss > memBudget {
		t.Errorf("%s: check took %v CPU and %d MiB; the budget is %d ordinary builds (%v) and %d MiB", name, cpu, rss>>20, checkRatio, checkRatio*ref, memBudget>>20)
	}
	out := filepath.Join(dir, name+".out")
	cpu, wall, rss, _ = childUsage(t, "build", path, out)
	var largest int64
	files, _ := os.ReadDir(out)
	for _, f := range files {
		if fi, err := f.Info(); err == nil && strings.HasSuffix(f.Name(), ".ll") {
			largest = max(largest, fi.Size())
		}
	}
	t.Logf("%s: build cpu %v wall %v peak %d MiB, largest .ll %d KiB; %.1f ordinary builds", name, cpu.Round(time.Millisecond),
		wall.Round(time.Millisecond), rss>>20, largest>>10, float64(cpu)/float64(ref))
	if cpu > buildRatio*ref || rss > memBudget || largest > llBudget || largest == 0 {
		t.Errorf("%s: build took %v CPU and %d MiB, largest .ll %d bytes; the budget is %d ordinary builds (%v), %d MiB, %d MiB",
			name, cpu, rss>>20, largest, buildRatio, buildRatio*ref, memBudget>>20, llBudget>>20)
	}
}
