package conformance

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/targets"
)

// Tolerance is the allowed error |got - want| / max(1, |want|) of f32
// outputs: o of f32 variants, every lse and merge_state's s (f32 whatever
// the storage type). f16 and bf16 outputs are held to half an ulp plus a
// tiny allowance instead (reference.CompareULP).
const Tolerance = 1e-5

// CompareOut checks an output of storage type dt against the reference:
// half an ulp (plus reference.HalfAllowance*mag) for f16/bf16, Tolerance
// for f32. The error it returns is in ulps of dt for half types.
func CompareOut(dt ir.DType, got []float32, want, mag []float64) (maxErr float64, idx int, ok bool) {
	if dt == ir.DTF32 {
		return reference.Compare(got, want, Tolerance)
	}
	return reference.CompareULP(dt, got, want, mag)
}

// Result is one kernel run checked against the reference.
type Result struct {
	Variant, Kernel, Case string
	Threads               int
	// MaxErr is o's largest error: relative (f32) or in ulps of the
	// storage type (f16, bf16); LSEErr lse's, relative.
	MaxErr, LSEErr float64
	// MagErr is o's largest error beyond the one rounding to the storage
	// type, in units of 2^-24 of the magnitude it is made of
	// (reference.MagErr): what reference.HalfAllowance must cover.
	MagErr float64
	// Allowance is the largest share of o's error allowance an element
	// used (AllowanceUsed): at most 1 when o passes.
	Allowance float64
	// Digest hashes the outputs (o and lse, or merge_state's v and s) as
	// the kernel wrote them; zero for results that compare no outputs.
	Digest uint64
	DType  ir.DType
	Pass   bool
	Note   string
}

func (r Result) String() string {
	status := "PASS"
	if !r.Pass {
		status = "FAIL"
	}
	// The bound printed is the one applied: f32 outputs and every lse
	// within Tolerance of max(1, |want|); f16/bf16 outputs within half an
	// ulp of the exact value plus HalfAllowance of the row's magnitude
	// (mag), so an error above 0.5ulp may pass: allowance_used says how
	// much of that allowance the worst element used (at most 1 passes).
	tol := fmt.Sprintf("max_err=%.2e lse_err=%.2e tol=%.0e", r.MaxErr, r.LSEErr, Tolerance)
	if r.DType == ir.DTF16 || r.DType == ir.DTBF16 {
		tol = fmt.Sprintf("max_err=%.2fulp bound=0.5ulp+2^-20*mag allowance_used=%.2f lse_err=%.2e tol=%.0e",
			r.MaxErr, r.Allowance, r.LSEErr, Tolerance)
	}
	s := fmt.Sprintf("%s %-28s %-34s threads=%-2d %s", status, r.Kernel, r.Case, r.Threads, tol)
	if r.Note != "" {
		s += "  " + r.Note
	}
	return s
}

// Suite holds one variant's built library: a target's entries built by
// its harness (targets.Harness) — CPU kernels, or CUDA launchers compiled
// for the emulator (or a GPU).
type Suite struct {
	V       *ir.Variant
	Target  string // the target's name
	Prefix  string
	Lib     Library
	Entries map[ir.Role]Entry
	// Dev, when set, is the memory the launchers work on: RunAttention and
	// RunMergeState copy every buffer to it, call the launcher with device
	// pointers, Sync and copy the outputs back (BuildCUDADeviceWith sets it
	// to the GPU). Nil: the entries get host pointers (CPU, emulator).
	Dev Device
	// Stack, when > 0, runs every host call on a new thread with a stack of
	// this many bytes (the caller's stack a kernel may use).
	Stack int
	// FPEnv, when not 0, runs every entry call with the calling thread's
	// floating-point control register set to it (x86-64: MXCSR, through
	// cpurt.Lib.CallFPEnv; aarch64: FPCR, in the runner, through
	// cpurt.Remote.CallFPEnv); threads the library starts in such a call
	// inherit it.
	FPEnv uint32
	// Lowered and Final are the module before and after the passes.
	Lowered, Final *ir.Module
	// Triple is the CPU suite's target triple (the levels of Level).
	Triple string
	// Level is the CPU level the entries run at (<prefix>_cpu_level):
	// the best this CPU supports, or the one AtLevel forced ("" for a
	// target without levels).
	Level string

	tgt targets.Target
	// rt is the runtime the library defines besides the entries (nil:
	// none; the CPU's messages, threads and levels).
	rt *targets.RuntimeSymbols
	// checksTables: the entries validate every table they read (else
	// only scalars are checked, on the host, and tables in device memory
	// are trusted).
	checksTables bool

	so string // the library loaded in this process, which AtLevel loads again

	keepLoaded bool // Close leaves Lib loaded (nvcc builds)

	// callHook, when set, makes every entry call of a CPU library loaded
	// in this process: it gets the case's buffers and the call (tests wrap
	// it, e.g. to make an allocation fail).
	callHook func(cb *caseBuffers, call func() (int32, error)) (int32, error)
}

// Library is the loaded kernels a Suite calls: a shared library in this
// process (*cpurt.Lib) or in a runner of another architecture
// (*cpurt.Remote, whose memory the suite reaches through Dev).
type Library interface {
	Call(sym string, args ...int64) (int32, error)
	CallVoid(sym string, args ...int64) error
	CallStr(sym string, code int32) string
	Close() error
}

// Entry is a public entry point and its parameters in call order; CUDA
// launchers take a trailing stream (passed as 0, the default stream).
type Entry struct {
	Symbol string
	Params []*ir.Param
	Stream bool
}

// Options says how BuildFor (BuildWith, BuildCUDAWith) compiles a
// variant's kernels. The zero value is what `attnc build` does by default.
type Options struct {
	// Passes is the pass table to run (nil: the target's own,
	// targets.PassTable), e.g. one with user passes inserted.
	Passes []passes.Pass
	// Triple is the target triple of a target that takes one (the CPU;
	// "" is the default, x86_64-unknown-linux-gnu). A triple of another architecture than
	// this machine's runs the kernels in the target's emulator
	// (cpurt.Remote): every case's buffers are copied to the runner and
	// the outputs back, through the suite's Dev.
	Triple string
	// CPULevels restricts the CPU target's clones to these levels
	// (driver.Options.CPULevels: level names, "host"); nil: every level.
	CPULevels []string
	// Link are more arguments of the library's link step
	// (targets.Harness.HostLibrary): the CPU library's
	// (cpurt.Toolchain.Link), the emulated CUDA library's.
	Link []string
}

// targetOptions are the build settings the targets read.
func (o Options) targetOptions() targets.Options {
	return targets.Options{Triple: o.Triple, CPULevels: o.CPULevels}
}

// compileFor schedules v for a target with the verifier after every pass
// and writes the target's files into dir.
func compileFor(v *ir.Variant, name, dir string, o Options) (*driver.Compiled, error) {
	c, _, err := compileFiles(v, name, dir, o)
	return c, err
}

// compileFiles is compileFor that returns the files it wrote too.
func compileFiles(v *ir.Variant, name, dir string, o Options) (*driver.Compiled, []targets.Artifact, error) {
	bo := driver.Options{Passes: passes.Options{VerifyEach: true}, Triple: o.Triple, CPULevels: o.CPULevels}
	if o.Passes != nil {
		bo.Tables = map[string][]passes.Pass{name: o.Passes}
	}
	c, err := driver.CompileFor(v, name, bo)
	if err != nil {
		return nil, nil, err
	}
	files, err := c.Target.Emit(v, c.Final, o.targetOptions())
	if err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return nil, nil, err
		}
	}
	return c, files, nil
}

// Build compiles v for the CPU into dir, links a shared library with the
// LLVM tools and loads it.
func Build(v *ir.Variant, dir string) (*Suite, error) { return BuildWith(v, dir, Options{}) }

// BuildWith is Build with options.
func BuildWith(v *ir.Variant, dir string, o Options) (*Suite, error) {
	return BuildFor(v, "cpu", dir, o)
}

// harnessOf finds a registered target and its harness.
func harnessOf(name string) (targets.Target, targets.Harness, error) {
	t, err := targets.Lookup(name)
	if err != nil {
		return nil, nil, err
	}
	h, ok := t.(targets.Harness)
	if !ok {
		return nil, nil, fmt.Errorf("target %s has no harness: its kernels cannot run on this machine", name)
	}
	return t, h, nil
}

// Harnessed lists the registered targets whose kernels run on this
// machine (targets.Harness), in name order.
func Harnessed() []string {
	var out []string
	for _, t := range targets.All() {
		if _, ok := t.(targets.Harness); ok {
			out = append(out, t.Name())
		}
	}
	return out
}

// BuildFor compiles v for the target named into dir, builds the files it
// writes into a library with the target's harness (targets.Harness) and
// loads it: in this process, or in a runner under the emulator of a
// foreign triple.
func BuildFor(v *ir.Variant, target, dir string, o Options) (*Suite, error) {
	t, h, err := harnessOf(target)
	if err != nil {
		return nil, err
	}
	topt := o.targetOptions()
	if err := targets.CheckOptions([]targets.Target{t}, topt); err != nil {
		return nil, err
	}
	if err := h.HarnessTools(topt); err != nil {
		return nil, err
	}
	c, files, err := compileFiles(v, t.Name(), dir, o)
	if err != nil {
		return nil, err
	}
	build := func() (targets.HostLibrary, error) { return h.HostLibrary(v, c.Final, dir, topt, o.Link) }
	var hl targets.HostLibrary
	if _, cpu := t.(targets.HostRuntime); HostLibraries != nil && !cpu && o.Triple == "" {
		var identity string
		if hb, ok := t.(targets.HostBuildIdentity); ok {
			identity = hb.HostBuildIdentity()
		}
		hl, err = HostLibraries.hostLibrary(HostLibraries.key(t.Name(), identity, files, o.Link), dir, build)
	} else {
		hl, err = build()
	}
	if err != nil {
		return nil, err
	}
	s := newSuite(v, t, h, c.Lowered, c.Final)
	s.Triple = o.Triple
	if hl.Runner != "" {
		tc, err := cpurt.ToolchainFor(hl.Runner)
		if err != nil {
			return nil, err
		}
		r, err := tc.OpenRemote(hl.Path)
		if err != nil {
			return nil, err
		}
		s.Lib, s.Dev = r, &remoteDevice{r}
		if s.rt != nil {
			s.Level = r.CallStr(s.rt.Level, 0)
		}
		return s, nil
	}
	s.so = hl.Path
	if s.Lib, s.Level, err = s.open(hl.Path, ""); err != nil {
		return nil, err
	}
	return s, nil
}

// newSuite is the suite of v on target t, lowered to lowered and
// scheduled to final, before its library is loaded.
func newSuite(v *ir.Variant, t targets.Target, h targets.Harness, lowered, final *ir.Module) *Suite {
	s := &Suite{V: v, Target: t.Name(), tgt: t, Prefix: final.Prefix, Entries: map[ir.Role]Entry{},
		Lowered: lowered, Final: final, checksTables: true}
	for _, e := range h.Entries(final) {
		s.Entries[e.Role] = Entry{Symbol: e.Symbol, Params: e.Params, Stream: e.Stream}
		s.checksTables = s.checksTables && e.ChecksTables
	}
	if r, ok := t.(targets.HostRuntime); ok {
		rt := r.RuntimeSymbols(final.Prefix)
		s.rt = &rt
	}
	return s
}

// open loads the library at path in this process; with a runtime that has
// levels, it has the library decide its level (see openAtLevel).
func (s *Suite) open(path, level string) (*cpurt.Lib, string, error) {
	if s.rt == nil || s.rt.Level == "" {
		lib, err := cpurt.Open(path)
		return lib, "", err
	}
	return openAtLevel(path, s.rt, level)
}

// levelMu serializes the first call into every CPU library this package
// loads, which decides the library's CPU level from $ATTNC_CPU_LEVEL:
// AtLevel sets the variable only while it holds the lock, so no other
// library decides its level meanwhile.
var levelMu sync.Mutex

// openAtLevel loads so and has it decide its CPU level with the runtime's
// level variable ($ATTNC_CPU_LEVEL) set to level ("": the process's own
// environment); it returns the level the library reports, and fails when
// it refuses level.
func openAtLevel(so string, rt *targets.RuntimeSymbols, level string) (*cpurt.Lib, string, error) {
	return openLevel(so, rt, level, false)
}

// openLevel is openAtLevel; with refusedOK a library that refuses level
// (reports another level, or none: "") is returned too.
func openLevel(so string, rt *targets.RuntimeSymbols, level string, refusedOK bool) (*cpurt.Lib, string, error) {
	levelMu.Lock()
	defer levelMu.Unlock()
	if level != "" {
		old, had := os.LookupEnv(rt.LevelEnv)
		os.Setenv(rt.LevelEnv, level)
		defer func() {
			if had {
				os.Setenv(rt.LevelEnv, old)
			} else {
				os.Unsetenv(rt.LevelEnv)
			}
		}()
	}
	lib, err := cpurt.Open(so)
	if err != nil {
		return nil, "", err
	}
	got := lib.CallStr(rt.Level, 0)
	if refusedOK {
		return lib, got, nil
	}
	if level != "" && got != level {
		lib.Close()
		return nil, "", fmt.Errorf("%s: CPU level %s refused (%s): the CPU cannot run it, or these kernels have no clone for it", filepath.Base(so), level, got)
	}
	return lib, got, nil
}

// AtLevel loads the suite's CPU library again (a copy, so that it decides
// its level afresh) with its entries forced to CPU level level, as
// $ATTNC_CPU_LEVEL=level does for a program; the copy shares everything
// else with s. It fails for a level the CPU cannot run.
func (s *Suite) AtLevel(level string) (*Suite, error) {
	if s.rt == nil || s.rt.LevelEnv == "" || s.so == "" || s.Dev != nil {
		return nil, fmt.Errorf("%s: only a CPU library loaded in this process can be forced to a level", s.V.Name)
	}
	data, err := os.ReadFile(s.so)
	if err != nil {
		return nil, err
	}
	cp := strings.TrimSuffix(s.so, ".so") + "." + level + ".so"
	if err := os.WriteFile(cp, data, 0o755); err != nil {
		return nil, err
	}
	lib, got, err := openAtLevel(cp, s.rt, level)
	if err != nil {
		return nil, err
	}
	c := *s
	c.Lib, c.Level, c.so = lib, got, cp
	return &c, nil
}

// remoteDevice is the memory of a runner process: a suite of a foreign
// triple copies every case's buffers there.
type remoteDevice struct{ r *cpurt.Remote }

func (d *remoteDevice) Alloc(n int) (int64, error)                { return d.r.Alloc(n) }
func (d *remoteDevice) Upload(dst int64, src *cpurt.Buffer) error { return d.r.Write(dst, src.U8()) }
func (d *remoteDevice) Download(dst *cpurt.Buffer, src int64) error {
	return d.r.Read(dst.U8(), src)
}
func (d *remoteDevice) Free(p int64) { d.r.Free(p) } //nolint:errcheck // a dead runner reports at the next call
func (d *remoteDevice) Sync() error  { return nil }

// entryArgs is role's entry and its arguments: the parameters bound by
// name, in the entry's order.
func (s *Suite) entryArgs(role ir.Role, vals map[string]int64) (Entry, []int64, error) {
	e, ok := s.Entries[role]
	if !ok {
		return Entry{}, nil, fmt.Errorf("%s: no %s entry", s.V.Name, role)
	}
	args := make([]int64, 0, len(e.Params)+1)
	for _, p := range e.Params {
		v, ok := vals[p.Name]
		if !ok {
			return Entry{}, nil, fmt.Errorf("%s: no value for argument %s", e.Symbol, p.Name)
		}
		args = append(args, v)
	}
	if e.Stream {
		args = append(args, 0)
	}
	return e, args, nil
}

// CallTimed is Call, also returning the call's wall time in seconds as the
// library measures it around the entry (a CPU library's CallTimed: without
// the Go runtime's entry into and exit from C), or timed from Go where the
// library cannot, or where the suite calls in a chosen floating-point
// environment or on a chosen stack.
func (s *Suite) CallTimed(role ir.Role, vals map[string]int64) (int32, float64, error) {
	l, ok := s.Lib.(interface {
		CallTimed(sym string, args ...int64) (int32, float64, error)
	})
	if !ok || s.FPEnv != 0 || s.Stack > 0 || s.Dev != nil {
		t0 := time.Now()
		st, err := s.Call(role, vals)
		return st, time.Since(t0).Seconds(), err
	}
	e, args, err := s.entryArgs(role, vals)
	if err != nil {
		return 0, 0, err
	}
	return l.CallTimed(e.Symbol, args...)
}

// callEntry binds an entry's parameters by name, in the entry's order.
func (s *Suite) callEntry(role ir.Role, vals map[string]int64) (int32, error) {
	e, args, err := s.entryArgs(role, vals)
	if err != nil {
		return 0, err
	}
	if s.FPEnv != 0 {
		l, ok := s.Lib.(interface {
			CallFPEnv(sym string, env uint32, args ...int64) (int32, error)
		})
		if !ok || s.Stack > 0 {
			return 0, fmt.Errorf("%s: the %s library cannot call in a chosen floating-point environment (or on a chosen stack too)", e.Symbol, s.Target)
		}
		return l.CallFPEnv(e.Symbol, s.FPEnv, args...)
	}
	if s.Stack > 0 {
		l, ok := s.Lib.(interface {
			CallOnStack(sym string, stack int, args ...int64) (int32, error)
		})
		if !ok {
			return 0, fmt.Errorf("%s: the %s library cannot call on a thread of a chosen stack size", e.Symbol, s.Target)
		}
		return l.CallOnStack(e.Symbol, s.Stack, args...)
	}
	return s.Lib.Call(e.Symbol, args...)
}

// SetThreads sets the library's worker count (no effect for a target
// whose runtime has none, e.g. CUDA).
func (s *Suite) SetThreads(n int) error {
	if s.rt == nil || s.rt.SetThreads == "" {
		return nil
	}
	return s.Lib.CallVoid(s.rt.SetThreads, int64(n))
}

// Threaded reports whether the library runs on a worker count SetThreads
// sets (the CPU): cases are worth running at several counts.
func (s *Suite) Threaded() bool { return s.rt != nil && s.rt.SetThreads != "" }

// StackBytes is the most stack a call of the entry sym needs on the
// calling thread (0 for a target whose runtime does not say).
func (s *Suite) StackBytes(sym string) int64 {
	r, ok := s.tgt.(targets.HostRuntime)
	if !ok {
		return 0
	}
	return r.StackBytes(s.Final, sym)
}

// Levels lists the CPU levels of the suite's triple, baseline first (nil
// for a target without levels).
func (s *Suite) Levels() ([]string, error) {
	tr, ok := s.tgt.(targets.Triples)
	if !ok {
		return nil, nil
	}
	return tr.Levels(s.Triple)
}

func (s *Suite) strerror(code int32) string {
	if s.rt == nil || s.rt.Strerror == "" {
		return fmt.Sprintf("status %d", code)
	}
	return s.Lib.CallStr(s.rt.Strerror, code)
}

func (s *Suite) enc(xs []float32) *cpurt.Buffer {
	b := reference.Encode(s.V.DType, xs)
	buf := cpurt.NewBuffer(len(b))
	copy(buf.U8(), b)
	return buf
}

func (s *Suite) dec(b *cpurt.Buffer) []float32 { return reference.Decode(s.V.DType, b.U8()) }

// encKV stores cache values as the cache's elements (8-bit codes for a
// quantized cache).
func (s *Suite) encKV(xs []float32) *cpurt.Buffer {
	b := reference.Encode(s.V.KVDType, xs)
	buf := cpurt.NewBuffer(len(b))
	copy(buf.U8(), b)
	return buf
}

// addScales adds a quantized cache's k_scale and v_scale (MLA: k_scale).
func (s *Suite) addScales(cb *caseBuffers, c *reference.Case) {
	if !s.V.Quantized() {
		return
	}
	cb.add("k_scale", cpurt.F32Buffer(c.KScale))
	if s.V.MLA == nil {
		cb.add("v_scale", cpurt.F32Buffer(c.VScale))
	}
}

// caseBuffers holds a case's inputs in C memory.
type caseBuffers struct {
	vals   map[string]int64
	bufs   []*cpurt.Buffer
	byName map[string]*cpurt.Buffer
	o      *cpurt.Buffer
	lse    *cpurt.Buffer
}

func (cb *caseBuffers) add(name string, b *cpurt.Buffer) *cpurt.Buffer {
	cb.bufs = append(cb.bufs, b)
	cb.vals[name] = b.Ptr()
	if cb.byName == nil {
		cb.byName = map[string]*cpurt.Buffer{}
	}
	cb.byName[name] = b
	return b
}

func (cb *caseBuffers) free() {
	for _, b := range cb.bufs {
		b.Free()
	}
}

// poisonF32 fills xs with NaN so that an output the kernel forgets to write
// fails the comparison.
func poisonF32(xs []float32) {
	for i := range xs {
		xs[i] = float32(math.NaN())
	}
}

func (s *Suite) buffers(c *reference.Case) *caseBuffers {
	v := s.V
	cb := &caseBuffers{vals: map[string]int64{}}
	cb.add("qo_indptr", cpurt.I32Buffer(c.QOIndptr()))
	if m := v.MLA; m != nil {
		// Split rows [.., r + dr] into the r and dr parts.
		split := func(xs []float32) (a, b []float32) {
			w := m.KVLoraRank + m.RopeDim
			for i := 0; i < len(xs); i += w {
				a = append(a, xs[i:i+m.KVLoraRank]...)
				b = append(b, xs[i+m.KVLoraRank:i+w]...)
			}
			return a, b
		}
		qn, qp := split(c.Q)
		ckv, kpe := split(c.KPages)
		cb.add("q_nope", s.enc(qn))
		cb.add("q_pe", s.enc(qp))
		cb.add("ckv_pages", s.encKV(ckv))
		cb.add("kpe_pages", s.encKV(kpe))
	} else {
		cb.add("q", s.enc(c.Q))
		cb.add("k_pages", s.encKV(c.KPages))
		cb.add("v_pages", s.encKV(c.VPages))
	}
	s.addScales(cb, c)
	cb.vals["num_pages"] = int64(c.NumPages)
	if v.Table == ir.BlockTable {
		table, maxBlocks, kvLens := c.BlockTable()
		cb.add("block_table", cpurt.I32Buffer(table))
		cb.vals["max_blocks"] = int64(maxBlocks)
		cb.add("kv_lens", cpurt.I32Buffer(kvLens))
	} else {
		indptr, indices, last := c.CSR(v.PageSize)
		cb.add("kv_indptr", cpurt.I32Buffer(indptr))
		cb.add("kv_indices", cpurt.I32Buffer(indices))
		cb.add("kv_last_page_len", cpurt.I32Buffer(last))
	}
	cb.vals["batch_size"] = int64(c.Batch)
	if len(c.Sinks) > 0 {
		cb.add("sinks", cpurt.F32Buffer(c.Sinks))
	}
	if c.QRopePos != nil {
		cb.add("q_rope_position", cpurt.I32Buffer(c.QRopePos))
		cb.add("k_rope_pos_offset", cpurt.I32Buffer(c.KRopeOffset))
	}
	if c.RopeCos != nil {
		cb.add("rope_cos", cpurt.F32Buffer(c.RopeCos))
		cb.add("rope_sin", cpurt.F32Buffer(c.RopeSin))
		cb.vals["rope_positions"] = int64(c.RopePositions)
	}
	if c.RopeFactors != nil {
		cb.add("rope_factors", cpurt.F32Buffer(c.RopeFactors))
	}
	if c.TreeOrder != nil {
		cb.add("tree_order", cpurt.I32Buffer(c.TreeOrder))
		cb.add("tree_order_indptr", cpurt.I32Buffer(c.TreeIndptr))
	}
	if c.CustomMask != nil {
		cb.add("custom_mask", cpurt.U8Buffer(c.CustomMask))
		cb.add("mask_indptr", cpurt.I32Buffer(c.MaskIndptr))
	}
	if c.KVTokenIndptr != nil {
		// prefill_ragged's rows: the variant's dtype, whatever the cache stores.
		cb.add("k", s.enc(c.RaggedK))
		cb.add("v", s.enc(c.RaggedV))
		cb.add("kv_token_indptr", cpurt.I32Buffer(c.KVTokenIndptr))
	}
	for _, p := range v.Params {
		xs := c.Params[p.Name]
		if p.T == ir.I32 {
			is := make([]int32, len(xs))
			for i, x := range xs {
				is[i] = int32(x)
			}
			cb.add(p.Name, cpurt.I32Buffer(is))
		} else {
			fs := make([]float32, len(xs))
			for i, x := range xs {
				fs[i] = float32(x)
			}
			cb.add(p.Name, cpurt.F32Buffer(fs))
		}
	}
	for name, d := range c.ParamDims {
		cb.vals[name] = int64(d)
	}
	nOut := c.TotalQ() * v.QOHeads * v.HeadDimV
	cb.o = cb.add("o", s.enc(nanSlice(nOut)))
	cb.lse = cb.add("lse", cpurt.F32Buffer(nanSlice(c.TotalQ()*v.QOHeads)))
	return cb
}

// CaseArgs lays out case c as the arguments of the suite's attention
// entries (host memory): scalar values and every buffer by name. Callers
// free the buffers.
func (s *Suite) CaseArgs(c *reference.Case) (vals map[string]int64, bufs map[string]*cpurt.Buffer) {
	cb := s.buffers(c)
	return cb.vals, cb.byName
}

func nanSlice(n int) []float32 {
	xs := make([]float32, n)
	poisonF32(xs)
	return xs
}

// RaggedLead is the number of poisoned K/V rows before the first
// sequence's in a prefill_ragged case (kv_token_indptr[0]): no sequence
// names them, so no kernel may read them.
const RaggedLead = 3

// RunAttention runs kernel (prefill, decode or prefill_ragged entry) on a
// random case and compares o and lse with the reference. prefill_ragged
// gets the case's K/V rows gathered into ragged rows
// (reference.Ragged), after RaggedLead poisoned ones.
func (s *Suite) RunAttention(role ir.Role, spec reference.CaseSpec, seed int64, threads int) Result {
	c := reference.NewCase(s.V, rand.New(rand.NewSource(seed)), spec)
	if role == ir.RolePrefillRagged {
		c = reference.Ragged(s.V, c, RaggedLead)
	}
	return s.RunAttentionCase(role, c, threads)
}

// RunAttentionCase runs kernel (prefill, decode or prefill_ragged entry)
// on case c, whose values the variant's dtype must represent exactly, and
// compares o and lse with the reference.
func (s *Suite) RunAttentionCase(role ir.Role, c *reference.Case, threads int) Result {
	r := Result{Variant: s.V.Name, Kernel: s.Entries[role].Symbol, Case: c.Name, Threads: threads, DType: s.V.DType}
	wantO, wantL, mag := reference.AttentionMag(s.V, c)
	cb := s.buffers(c)
	defer cb.free()
	if err := s.SetThreads(threads); err != nil {
		r.Note = err.Error()
		return r
	}
	st, err := s.run(role, cb)
	if err != nil || st != 0 {
		r.Note = fmt.Sprintf("status %d %v", st, err)
		if err == nil {
			r.Note += ": " + s.strerror(st)
		}
		return r
	}
	var okO, okL bool
	var idx int
	gotO := s.dec(cb.o)
	r.MaxErr, idx, okO = CompareOut(s.V.DType, gotO, wantO, mag)
	r.MagErr = reference.MagErr(s.V.DType, gotO, wantO, mag)
	r.Allowance = AllowanceUsed(s.V.DType, gotO, wantO, mag)
	r.Digest = digest(cb.o, cb.lse)
	if !okO {
		r.Note = fmt.Sprintf("o[%d] = %v, want %v", idx, gotO[max(idx, 0)], wantO[max(idx, 0)])
	}
	r.LSEErr, idx, okL = reference.Compare(cb.lse.F32(), wantL, Tolerance)
	if !okL && okO {
		r.Note = fmt.Sprintf("lse[%d] = %v, want %v", idx, cb.lse.F32()[max(idx, 0)], wantL[max(idx, 0)])
	}
	r.Pass = okO && okL
	return r
}

// RunMergeState merges two random partial states (some rows empty on one
// or both sides, the empty side's values poisoned with NaN) and compares
// with the reference merge.
func (s *Suite) RunMergeState(n int, seed int64, threads int) Result {
	v := s.V
	r := Result{Variant: v.Name, Kernel: s.Entries[ir.RoleMergeState].Symbol, Case: fmt.Sprintf("random n=%d", n), Threads: threads, DType: v.DType}
	rng := rand.New(rand.NewSource(seed))
	rows, d := n*v.QOHeads, v.HeadDimV
	va, vb := make([]float32, rows*d), make([]float32, rows*d)
	sa, sb := make([]float32, rows), make([]float32, rows)
	for i := range va {
		va[i] = reference.Round(v.DType, rng.Float32()*2-1)
		vb[i] = reference.Round(v.DType, rng.Float32()*2-1)
	}
	ninf, pinf, nan := float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN())
	for i := range sa {
		sa[i], sb[i] = rng.Float32()*8-4, rng.Float32()*8-4
		switch i % 10 {
		case 1:
			sa[i] = ninf
		case 2:
			sb[i] = ninf
		case 3:
			sa[i], sb[i] = ninf, ninf
		case 4: // a bad state on either side poisons the row
			sa[i] = nan
		case 5:
			sb[i] = pinf
		case 6:
			sa[i], sb[i] = nan, ninf
		case 7:
			sa[i], sb[i] = ninf, pinf
		}
	}
	f64 := func(xs []float32) []float64 {
		o := make([]float64, len(xs))
		for i, x := range xs {
			o[i] = float64(x)
		}
		return o
	}
	wantV, wantS, mag := reference.MergeStateMag(v.LSEBase, f64(va), f64(sa), f64(vb), f64(sb))
	// An empty side's values may be garbage: poison them after computing the reference.
	for i := range sa {
		for j := 0; j < d; j++ {
			if math.IsInf(float64(sa[i]), -1) {
				va[i*d+j] = float32(math.NaN())
			}
			if math.IsInf(float64(sb[i]), -1) {
				vb[i*d+j] = float32(math.NaN())
			}
		}
	}
	cb := s.mergeArgs(va, sa, vb, sb, n)
	defer cb.free()
	bv, bs := cb.byName["v"], cb.byName["s"]
	if err := s.SetThreads(threads); err != nil {
		r.Note = err.Error()
		return r
	}
	st, err := s.run(ir.RoleMergeState, cb)
	if err != nil || st != 0 {
		r.Note = fmt.Sprintf("status %d %v", st, err)
		return r
	}
	var okV, okS bool
	gotV := s.dec(bv)
	r.MaxErr, _, okV = compareNaN(gotV, wantV, func(g []float32, w []float64) (float64, int, bool) {
		return CompareOut(v.DType, g, w, mag)
	})
	r.MagErr = reference.MagErr(v.DType, gotV, wantV, mag)
	r.Allowance = AllowanceUsed(v.DType, gotV, wantV, mag)
	r.Digest = digest(bv, bs)
	r.LSEErr, _, okS = compareNaN(bs.F32(), wantS, func(g []float32, w []float64) (float64, int, bool) {
		return reference.Compare(g, w, Tolerance)
	})
	r.Pass = okV && okS
	return r
}

// compareNaN is compare where want may hold NaN: got must be NaN exactly
// there (merge_state's rule for NaN or +inf states), and compare judges the
// other elements.
func compareNaN(got []float32, want []float64, compare func([]float32, []float64) (float64, int, bool)) (maxErr float64, idx int, ok bool) {
	if len(got) != len(want) {
		return compare(got, want)
	}
	g := append([]float32(nil), got...)
	w := append([]float64(nil), want...)
	for i := range w {
		if math.IsNaN(w[i]) {
			if !math.IsNaN(float64(g[i])) {
				return math.Inf(1), i, false
			}
			g[i], w[i] = 0, 0
		}
	}
	return compare(g, w)
}

// mergeArgs lays out merge_state's arguments: states (va, sa) and (vb, sb)
// of n rows.
func (s *Suite) mergeArgs(va, sa, vb, sb []float32, n int) *caseBuffers {
	cb := &caseBuffers{vals: map[string]int64{"n": int64(n)}}
	cb.add("v", s.enc(va))
	cb.add("s", cpurt.F32Buffer(sa))
	cb.add("v_other", s.enc(vb))
	cb.add("s_other", cpurt.F32Buffer(sb))
	return cb
}

// Matrix is the case list for a variant, scaled to its page size: decode
// batches, ragged prefill with empty sequences, shared prefixes, query
// chunks spanning several pages and tiles, kv_len not a multiple of the
// page size, with NaN/Inf poisoned tails and unused pages throughout, a
// page hidden by -1, and NaN/Inf at every position the mask hides from the
// whole call.
func Matrix(v *ir.Variant) []reference.CaseSpec {
	ps := v.PageSize
	cases := []reference.CaseSpec{
		{Name: "decode batch", QLens: []int{1, 1, 1, 1}, KVLens: []int{1, ps, 3*ps + 1, 70}, ExtraPages: 2, NaNFill: true},
		{Name: "ragged prefill, empty seq", QLens: []int{5, 0, 17, 1}, KVLens: []int{5 + ps, 0, 17 + 2*ps + 3, 9}, ExtraPages: 1, NaNFill: true},
		{Name: "shared prefix", QLens: []int{3, 4, 2}, KVLens: []int{2*ps + 3, 2*ps + 7, 3 * ps}, SharePrefix: true, ExtraPages: 1, NaNFill: true},
		{Name: "chunk over pages", QLens: []int{70}, KVLens: []int{70 + 2*ps + 5}, NaNFill: true},
		{Name: "prefill from empty cache", QLens: []int{37}, KVLens: []int{37}, NaNFill: true},
	}
	// A -1 entry hides a block (block tables) or a page (CSR kv_indices).
	cases = append(cases, reference.CaseSpec{Name: "hidden page", QLens: []int{9, 2}, KVLens: []int{3*ps + 9, 4*ps + 1}, ExtraPages: 1, NaNFill: true, HideBlock: 1},
		reference.CaseSpec{Name: "NaN where masked", QLens: []int{7, 1, 30}, KVLens: []int{150 + ps, 90, 30 + 3*ps}, ExtraPages: 1, NaNFill: true, NaNMasked: true})
	if v.NonCausal() {
		// Cross / encoder attention: more queries than keys, and no keys.
		cases = append(cases, reference.CaseSpec{Name: "cross attention q_len > kv_len", QLens: []int{9, 70, 3}, KVLens: []int{3, 2*ps + 1, 0}, ExtraPages: 1, NaNFill: true})
	}
	return cases
}

// DecodeMatrix is the case list for the decode entry (one query per
// sequence); small batches make the entry split KV over threads.
func DecodeMatrix(v *ir.Variant) []reference.CaseSpec {
	ps := v.PageSize
	cases := []reference.CaseSpec{
		{Name: "decode batch", QLens: []int{1, 1, 1}, KVLens: []int{1, 2*ps + 1, 200}, ExtraPages: 1, NaNFill: true},
		{Name: "decode long single", QLens: []int{1}, KVLens: []int{300 + ps}, NaNFill: true},
	}
	cases = append(cases, reference.CaseSpec{Name: "decode hidden page", QLens: []int{1, 1}, KVLens: []int{2*ps + 3, 3*ps + 5}, NaNFill: true, HideBlock: 1},
		reference.CaseSpec{Name: "decode NaN where masked", QLens: []int{1, 1}, KVLens: []int{300 + ps, 2*ps + 70}, NaNFill: true, NaNMasked: true})
	if v.NonCausal() {
		cases = append(cases, reference.CaseSpec{Name: "decode empty cache (mask none)", QLens: []int{1, 1, 1}, KVLens: []int{0, ps + 3, 0}, NaNFill: true})
	}
	return cases
}

// RaggedMatrix is the case list for the prefill_ragged entry: the prefill
// matrix without hidden pages (ragged rows hide nothing), whose K/V rows
// RunAttention gathers — poisoned rows where the mask hides a position
// from the whole call included — plus TVM's chunk shape (kv_len = q_len
// over a batch) with decode-like one-token sequences.
func RaggedMatrix(v *ir.Variant) []reference.CaseSpec {
	var out []reference.CaseSpec
	for _, c := range Matrix(v) {
		if c.HideBlock == 0 {
			out = append(out, c)
		}
	}
	return append(out, reference.CaseSpec{Name: "chunks of their own rows", QLens: []int{33, 1, 0, 70}, KVLens: []int{33, 1, 0, 70}, NaNMasked: true})
}

// RunAttentionAll runs the prefill and decode matrices (the entries the
// variant has) at one thread count.
func (s *Suite) RunAttentionAll(threads int, seed int64) []Result {
	var out []Result
	if _, ok := s.Entries[ir.RolePrefill]; ok {
		for i, spec := range Matrix(s.V) {
			out = append(out, s.RunAttention(ir.RolePrefill, spec, seed+int64(i), threads))
		}
	}
	if _, ok := s.Entries[ir.RoleDecode]; ok {
		for i, spec := range DecodeMatrix(s.V) {
			out = append(out, s.RunAttention(ir.RoleDecode, spec, seed+int64(i), threads))
		}
	}
	return out
}

// RunAll runs the whole matrix for every entry of the suite's variant at
// the given thread counts.
func (s *Suite) RunAll(threads []int, seed int64) []Result {
	var out []Result
	for _, role := range []ir.Role{ir.RolePrefill, ir.RoleDecode, ir.RoleMergeState, ir.RolePrefillRagged} {
		if _, ok := s.Entries[role]; !ok {
			continue
		}
		for _, t := range threads {
			switch role {
			case ir.RolePrefill:
				for i, spec := range Matrix(s.V) {
					out = append(out, s.RunAttention(role, spec, seed+int64(i), t))
				}
			case ir.RoleDecode:
				for i, spec := range DecodeMatrix(s.V) {
					out = append(out, s.RunAttention(role, spec, seed+int64(i), t))
				}
			case ir.RoleMergeState:
				out = append(out, s.RunMergeState(7, seed, t))
			case ir.RolePrefillRagged:
				for i, spec := range RaggedMatrix(s.V) {
					out = append(out, s.RunAttention(role, spec, seed+int64(i), t))
				}
			}
		}
	}
	out = append(out, s.RunBadInputs(seed)...)
	out = append(out, s.RunMergeStateBad(seed)...)
	out = append(out, s.RunPageKernels(seed)...)
	if _, ok := s.Entries[ir.RoleQKVAppend]; ok {
		out = append(out, s.RunQKVAppend(seed, 1<<20)...)
	}
	return out
}
