// Package lltest holds what the tests of the LLVM builder (codegen/llvm)
// and of the CPU target (targets/cpu) share: kernel-IR constructors, and
// compiling an .ll with LLVM 14's opt and llc, linking it with a C driver
// and reading the driver's "key value" lines.
//
// lltest imports ir and internal/needtool; only tests import it.
package lltest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
)

// ---- kernel-IR construction helpers ----

func Blk(ss ...ir.Stmt) *ir.Block { return &ir.Block{Stmts: ss} }

func Buf(name string, t ir.Type) *ir.Param { return &ir.Param{Name: name, Buffer: true, Elem: t} }

func Scalar(name string, t ir.Type) *ir.Param { return &ir.Param{Name: name, Elem: t} }

func I32(name string) *ir.Ref { return ir.R(name, ir.I32) }

func F32(name string) *ir.Ref { return ir.R(name, ir.F32) }

func Loop(v string, lo, hi ir.Expr, kind ir.LoopKind, body ...ir.Stmt) *ir.For {
	return &ir.For{Var: v, Lo: lo, Hi: hi, Kind: kind, Body: Blk(body...)}
}

func Store(b string, idx, v ir.Expr) *ir.Store { return &ir.Store{Buf: b, Index: idx, Value: v} }

func Let(n string, v ir.Expr) *ir.Let { return &ir.Let{Name: n, Value: v} }

func Var(n string, v ir.Expr) *ir.Var { return &ir.Var{Name: n, Init: v} }

func Set(n string, v ir.Expr) *ir.Assign { return &ir.Assign{Name: n, Value: v} }

func Ret(v ir.Expr) *ir.Return { return &ir.Return{Value: v} }

func If(c ir.Expr, then *ir.Block, els *ir.Block) *ir.If {
	return &ir.If{Cond: c, Then: then, Else: els}
}

func Add(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Add, x, y) }
func Mul(x, y ir.Expr) ir.Expr { return ir.Bin(ir.Mul, x, y) }

func Kernel(name string, params []*ir.Param, body ...ir.Stmt) *ir.Kernel {
	return &ir.Kernel{Name: name, Params: params, Body: Blk(body...)}
}

// Module is a module of ks with the errors bad_input (-1) and no_memory
// (-3).
func Module(name string, ks ...*ir.Kernel) *ir.Module {
	return &ir.Module{
		Name: name, Prefix: name, Kernels: ks,
		Errors: []ir.ErrorCode{
			{Code: -1, Name: "bad_input", Msg: "bad input"},
			{Code: -3, Name: "no_memory", Msg: "out of memory"},
		},
	}
}

// ---- toolchain ----

// Toolchain is LLVM 14's opt and llc and gcc, with the CPU flags for this
// host.
type Toolchain struct {
	Opt, LLC, GCC string
	MCPU          string
	// MAttr is -mattr for opt and llc: "+f16c" where the host converts
	// half natively but is not x86-64-v3 as a whole (a VM may hide lzcnt),
	// so half widening is still native rather than a libgcc call that gcc's
	// runtime does not define (__gnu_h2f_ieee).
	MAttr string
}

// CPUArgs returns the -mcpu (and -mattr) flags for this host.
func (tc *Toolchain) CPUArgs() []string {
	args := []string{"-mcpu=" + tc.MCPU}
	if tc.MAttr != "" {
		args = append(args, "-mattr="+tc.MAttr)
	}
	return args
}

// CPUInfoFlags are the flags /proc/cpuinfo lists for the first CPU.
func CPUInfoFlags() map[string]bool {
	out := map[string]bool{}
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "flags") {
			for _, f := range strings.Fields(line) {
				out[f] = true
			}
			break
		}
	}
	return out
}

// FindTool finds an LLVM 14 tool (or any tool on PATH).
func FindTool(name string) string {
	for _, dir := range []string{"/usr/lib/llvm-14/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// cpuMcpu is x86-64-v3 when /proc/cpuinfo lists all its features, else
// x86-64.
func cpuMcpu() string {
	flags := CPUInfoFlags()
	for _, need := range []string{"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"} {
		if !flags[need] {
			return "x86-64"
		}
	}
	return "x86-64-v3"
}

// NeedToolchain finds the toolchain or skips (fails under ATTNC_REQUIRE_TOOLS).
func NeedToolchain(t *testing.T) *Toolchain {
	t.Helper()
	tc := &Toolchain{Opt: FindTool("opt"), LLC: FindTool("llc"), GCC: FindTool("gcc"), MCPU: cpuMcpu()}
	if tc.MCPU == "x86-64" && CPUInfoFlags()["f16c"] {
		tc.MAttr = "+f16c"
	}
	var missing []string
	for _, tool := range []struct{ name, path string }{{"opt", tc.Opt}, {"llc", tc.LLC}, {"gcc", tc.GCC}} {
		if tool.path == "" {
			missing = append(missing, tool.name)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("LLVM 14 opt/llc and gcc are needed to compile and run generated code; missing: %s", strings.Join(missing, ", "))
		needtool.Check(t, errors.New(msg))
	}
	return tc
}

// RunCmd runs a command in dir and fails the test when it fails.
func RunCmd(t *testing.T, dir, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// Built is an .ll compiled (and linked with a C driver).
type Built struct {
	Dir     string
	LL      string // emitted IR
	OptLL   string // opt -O3 output
	Remarks string // opt's -pass-remarks=loop-vectorize output
	Exe     string
}

// Build verifies and optimizes ll, compiles it to an object and links it
// with the C driver (none when driver is "").
func (tc *Toolchain) Build(t *testing.T, ll, driver string) *Built {
	t.Helper()
	dir := t.TempDir()
	b := &Built{Dir: dir, LL: ll}
	if err := os.WriteFile(filepath.Join(dir, "k.ll"), []byte(ll), 0o644); err != nil {
		t.Fatal(err)
	}
	RunCmd(t, dir, tc.Opt, "-verify", "-disable-output", "k.ll")
	_, b.Remarks = RunCmd(t, dir, tc.Opt, append(append([]string{"-O3"}, tc.CPUArgs()...), "-pass-remarks=loop-vectorize", "-S", "k.ll", "-o", "k.opt.ll")...)
	opt, err := os.ReadFile(filepath.Join(dir, "k.opt.ll"))
	if err != nil {
		t.Fatal(err)
	}
	b.OptLL = string(opt)
	RunCmd(t, dir, tc.LLC, append(append([]string{"-O3"}, tc.CPUArgs()...), "-filetype=obj", "-relocation-model=pic", "k.opt.ll", "-o", "k.o")...)
	if driver != "" {
		src := "#include <stdio.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <math.h>\n#include <unistd.h>\n" + driver
		if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		RunCmd(t, dir, tc.GCC, "-O1", "-o", "prog", "main.c", "k.o", "-lm", "-lpthread")
		b.Exe = filepath.Join(dir, "prog")
	}
	return b
}

// Run runs the linked driver and returns its output.
func (b *Built) Run(t *testing.T) string {
	t.Helper()
	out, _ := RunCmd(t, b.Dir, b.Exe)
	return out
}

// Results parses driver output lines "key value".
func Results(t *testing.T, out string) map[string]string {
	t.Helper()
	r := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad driver line %q", line)
		}
		r[k] = v
	}
	return r
}

// CheckInt checks an integer result.
func CheckInt(t *testing.T, r map[string]string, key string, want int64) {
	t.Helper()
	got, err := strconv.ParseInt(r[key], 10, 64)
	if err != nil {
		t.Errorf("%s: bad value %q", key, r[key])
		return
	}
	if got != want {
		t.Errorf("%s = %d, want %d", key, got, want)
	}
}

// CheckFloat checks a float result to a relative 2e-6 (NaN and infinities
// exactly).
func CheckFloat(t *testing.T, r map[string]string, key string, want float64) {
	t.Helper()
	got, err := strconv.ParseFloat(r[key], 64)
	if strings.HasSuffix(r[key], "nan") { // glibc prints -nan
		got, err = math.NaN(), nil
	}
	if err != nil {
		t.Errorf("%s: bad value %q", key, r[key])
		return
	}
	switch {
	case math.IsNaN(want):
		if !math.IsNaN(got) {
			t.Errorf("%s = %v, want NaN", key, got)
		}
	case math.IsInf(want, 0):
		if got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	default:
		if math.Abs(got-want) > 2e-6*math.Abs(want)+1e-12 {
			t.Errorf("%s = %.9g, want %.9g", key, got, want)
		}
	}
}

// FuncBody returns the text of function name in an .ll (or assembly) file.
func FuncBody(ll, name string) string {
	re := regexp.MustCompile(`(?m)^define [^\n]*@` + regexp.QuoteMeta(name) + `\(`)
	loc := re.FindStringIndex(ll)
	if loc == nil {
		return ""
	}
	rest := ll[loc[0]:]
	if end := strings.Index(rest, "\n}\n"); end >= 0 {
		return rest[:end+3]
	}
	return rest
}
