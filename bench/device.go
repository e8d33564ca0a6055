package bench

// The GPU path: `attnc bench --target cuda --gpu` measures the CUDA
// launchers on a device against a device-to-device copy of the same size,
// and prints key=value lines that scripts/gpu-check.sh reads. The CPU
// path (cpu.go) measures against the machine yardsticks instead.

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"time"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// Options are the shapes and the time budget of a device run.
type Options struct {
	Batch   int     // decode: sequences (default 8)
	KVLen   int     // decode: cached tokens per sequence (default 4096)
	QLen    int     // prefill: q_len = kv_len of its one sequence (default 2048)
	Seconds float64 // least wall time of each measurement (default 1)
	Seed    int64   // random inputs
}

func (o Options) withDefaults() Options {
	if o.Batch == 0 {
		o.Batch = 8
	}
	if o.KVLen == 0 {
		o.KVLen = 4096
	}
	if o.QLen == 0 {
		o.QLen = 2048
	}
	if o.Seconds == 0 {
		o.Seconds = 1
	}
	return o
}

// Measurement is Calls repetitions that took Seconds of wall time in all.
type Measurement struct {
	Calls   int
	Seconds float64
}

// PerCall is the mean wall time of one call in seconds (0 if none ran).
func (m Measurement) PerCall() float64 {
	if m.Calls == 0 {
		return 0
	}
	return m.Seconds / float64(m.Calls)
}

// rate is amount per call divided by the time per call (0 if none ran).
func (m Measurement) rate(amount float64) float64 {
	if m.Calls == 0 || m.Seconds <= 0 {
		return 0
	}
	return amount / m.PerCall()
}

// DeviceReport is one variant's device run. Rates are derived from the
// measurements.
type DeviceReport struct {
	Variant *ir.Variant
	Target  string // cuda
	Opts    Options

	HasDecode  bool
	DecodeKV   int64       // K+V bytes one decode call reads
	Decode     Measurement // decode entry
	Copy       Measurement // device-to-device copy of DecodeKV bytes
	HasPrefill bool
	Causal     bool        // prefill FLOPs halved
	Prefill    Measurement // prefill entry
}

// DecodeGBps is the decode's K+V bytes read per second, in GB/s (1e9).
func (r *DeviceReport) DecodeGBps() float64 { return r.Decode.rate(float64(r.DecodeKV)) / 1e9 }

// CopyGBps is the copy's bytes read plus bytes written per second, in GB/s.
func (r *DeviceReport) CopyGBps() float64 { return r.Copy.rate(2*float64(r.DecodeKV)) / 1e9 }

// RatioVsCopy is DecodeGBps / CopyGBps.
func (r *DeviceReport) RatioVsCopy() float64 { return ratio(r.DecodeGBps(), r.CopyGBps()) }

// DecodeFLOPs is the work of one decode call: 2·batch·kv_len·qo_heads·(d_qk+d_v).
func (r *DeviceReport) DecodeFLOPs() float64 {
	v := r.Variant
	return 2 * float64(r.Opts.Batch) * float64(r.Opts.KVLen) * float64(v.QOHeads) * float64(v.HeadDimQK+v.HeadDimV)
}

// PrefillFLOPs is the nominal work of one prefill call:
// 2·q·kv·qo_heads·(d_qk+d_v) (4·q·kv·d·heads when d_qk = d_v), halved for a
// causal or window mask.
func (r *DeviceReport) PrefillFLOPs() float64 {
	v := r.Variant
	f := 2 * float64(r.Opts.QLen) * float64(r.Opts.QLen) * float64(v.QOHeads) * float64(v.HeadDimQK+v.HeadDimV)
	if r.Causal {
		f /= 2
	}
	return f
}

// PrefillFLOPS is the prefill's FLOP/s.
func (r *DeviceReport) PrefillFLOPS() float64 { return r.Prefill.rate(r.PrefillFLOPs()) }

// DecodeFLOPS is the decode's FLOP/s.
func (r *DeviceReport) DecodeFLOPS() float64 { return r.Decode.rate(r.DecodeFLOPs()) }

// RatioVsDecode is the prefill's FLOP/s over the decode's.
func (r *DeviceReport) RatioVsDecode() float64 { return ratio(r.PrefillFLOPS(), r.DecodeFLOPS()) }

// causal reports whether the mask hides every kv_pos > q_pos (causal, or a
// window, which implies it).
func causal(v *ir.Variant) bool {
	for _, m := range v.Masks {
		if m.Kind == ir.MaskCausal || m.Kind == ir.MaskWindow {
			return true
		}
	}
	return false
}

// String prints the report as key=value lines: a header with the shape of
// the variant, then one line per measurement (times in ms, rates in GB/s
// and GFLOP/s and TFLOP/s). scripts/gpu-check.sh reads them.
func (r *DeviceReport) String() string {
	v := r.Variant
	var sb strings.Builder
	fmt.Fprintf(&sb, "bench %s target=%s-device", v.Name, r.Target)
	fmt.Fprintf(&sb, " dtype=%s qo_heads=%d kv_heads=%d head_dim_qk=%d head_dim_v=%d page_size=%d\n",
		v.DType, v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV, v.PageSize)
	if r.HasDecode {
		fmt.Fprintf(&sb, "decode  %s batch=%d kv_len=%d calls=%d ms=%.4g kv_bytes=%d gbps=%.2f copy=cudaMemcpyD2D copy_ms=%.4g copy_gbps=%.2f ratio_vs_copy=%.3f gflops=%.2f\n",
			v.Name, r.Opts.Batch, r.Opts.KVLen, r.Decode.Calls, 1e3*r.Decode.PerCall(), r.DecodeKV, r.DecodeGBps(),
			1e3*r.Copy.PerCall(), r.CopyGBps(), r.RatioVsCopy(), r.DecodeFLOPS()/1e9)
	} else {
		fmt.Fprintf(&sb, "decode  %s skipped: no decode entry\n", v.Name)
	}
	if r.HasPrefill {
		fmt.Fprintf(&sb, "prefill %s batch=1 q_len=%d kv_len=%d causal=%t calls=%d ms=%.4g gflops=%.2f tflops=%.4f ratio_vs_decode=%.2f\n",
			v.Name, r.Opts.QLen, r.Opts.QLen, r.Causal, r.Prefill.Calls, 1e3*r.Prefill.PerCall(),
			r.PrefillFLOPS()/1e9, r.PrefillFLOPS()/1e12, r.RatioVsDecode())
	} else {
		fmt.Fprintf(&sb, "prefill %s skipped: no prefill entry\n", v.Name)
	}
	return sb.String()
}

// RunDevice measures the suite's decode and prefill launchers on its
// Device and the device-to-device copy baseline, each for at least
// o.Seconds. The inputs are uploaded once and the calls are timed with the
// device synchronized at the end of each timed group; s.Dev must be a
// conformance.DeviceCopier.
func RunDevice(s *conformance.Suite, o Options) (*DeviceReport, error) {
	o = o.withDefaults()
	if o.Batch < 1 || o.KVLen < 1 || o.QLen < 1 || o.Seconds < 0 {
		return nil, fmt.Errorf("bench: bad options %+v", o)
	}
	if s.Dev == nil {
		return nil, fmt.Errorf("bench: %s: RunDevice needs a suite on a device (the CPU bench is RunCPU)", s.V.Name)
	}
	r := &DeviceReport{Variant: s.V, Target: s.Target, Opts: o, Causal: causal(s.V)}
	if _, ok := s.Entries[ir.RoleDecode]; ok {
		w, err := newWorkload(s, ir.RoleDecode, decodeCall(o.Batch, o.KVLen), o.Seed)
		if err != nil {
			return nil, err
		}
		r.HasDecode, r.DecodeKV = true, w.kvBytes
		r.Decode, err = w.measure(o.Seconds)
		w.free()
		if err != nil {
			return nil, fmt.Errorf("bench: %s decode: %w", s.V.Name, err)
		}
		r.Copy, err = measureCopy(s.Dev, int(r.DecodeKV), o.Seconds)
		if err != nil {
			return nil, fmt.Errorf("bench: copy baseline: %w", err)
		}
	}
	if _, ok := s.Entries[ir.RolePrefill]; ok {
		w, err := newWorkload(s, ir.RolePrefill, prefillCall(o.QLen), o.Seed+1)
		if err != nil {
			return nil, err
		}
		r.HasPrefill = true
		r.Prefill, err = w.measure(o.Seconds)
		w.free()
		if err != nil {
			return nil, fmt.Errorf("bench: %s prefill: %w", s.V.Name, err)
		}
	}
	return r, nil
}

// workload is one entry with its inputs in place on the suite's Device
// (host buffers and their device copies), ready to be called again and
// again.
type workload struct {
	s       *conformance.Suite
	role    ir.Role
	vals    map[string]int64 // the arguments the entry gets
	host    []*cpurt.Buffer
	dev     []int64
	o       *cpurt.Buffer // host output
	oDev    int64         // its device copy
	kvBytes int64         // K+V bytes the call reads
}

// newWorkload builds a random paged cache for sh: every sequence's pages
// scattered over the pool in random order, values uniform in [-1, 1]
// (reference.NewCase's cases).
func newWorkload(s *conformance.Suite, role ir.Role, sh workloadShape, seed int64) (w *workload, err error) {
	v := s.V
	rng := rand.New(rand.NewSource(seed))
	es := reference.Size(v.DType)
	w = &workload{s: s, role: role, vals: map[string]int64{}}
	defer func() {
		if err != nil {
			w.free()
		}
	}()
	batch := len(sh.qLens)
	rowBytes := int64(v.KVHeads) * int64(v.HeadDimQK+v.HeadDimV) * int64(es)
	if v.MLA != nil { // V is the compressed KV that K already holds
		rowBytes = int64(v.HeadDimQK) * int64(es)
	}
	for b := range batch {
		w.kvBytes += int64(sh.kvLens[b]) * rowBytes
	}
	// The conformance layout of a reference case: every feature's
	// arguments (page tables, masks, RoPE positions, MLA parts) by name.
	c := reference.NewCase(v, rng, reference.CaseSpec{Name: "bench", QLens: sh.qLens, KVLens: sh.kvLens})
	vals, bufs := s.CaseArgs(c)
	var names []string
	for name := range bufs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		w.host = append(w.host, bufs[name])
	}
	w.vals = vals
	w.o = bufs["o"]
	// Device copies; the entry gets their addresses.
	for i, b := range w.host {
		d, err := s.Dev.Alloc(b.Len())
		if err != nil {
			return w, err
		}
		w.dev = append(w.dev, d)
		if err := s.Dev.Upload(d, b); err != nil {
			return w, err
		}
		w.vals[names[i]] = d
		if b == w.o {
			w.oDev = d
		}
	}
	return w, nil
}

// call runs the entry once and fails on a nonzero status.
func (w *workload) call() error {
	st, err := w.s.Call(w.role, w.vals)
	if err != nil {
		return err
	}
	if st != 0 {
		return fmt.Errorf("%s returned status %d", w.s.Entries[w.role].Symbol, st)
	}
	return nil
}

func (w *workload) sync() error { return w.s.Dev.Sync() }

// measure times the entry (after one untimed call) and then checks that
// the output is finite: a benchmark of a kernel that computes garbage is
// worth nothing.
func (w *workload) measure(seconds float64) (Measurement, error) {
	m, err := measure(w.call, w.sync, seconds)
	if err != nil {
		return m, err
	}
	return m, w.checkOutput()
}

func (w *workload) checkOutput() error {
	if err := w.s.Dev.Download(w.o, w.oDev); err != nil {
		return err
	}
	for i, x := range reference.Decode(w.s.V.DType, w.o.U8()) {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("output o[%d] = %v after the timed calls", i, x)
		}
	}
	return nil
}

func (w *workload) free() {
	for _, d := range w.dev {
		w.s.Dev.Free(d)
	}
	for _, b := range w.host {
		b.Free()
	}
	w.dev, w.host = nil, nil
}

// measure calls f once untimed (warm-up; sync after it), then in timed
// groups of 1, 2, 4, ... calls (at most 1024 per group), each group ended
// by sync, until at least seconds have passed; at least two calls are
// timed.
func measure(f, sync func() error, seconds float64) (Measurement, error) {
	if err := f(); err != nil {
		return Measurement{}, err
	}
	if err := sync(); err != nil {
		return Measurement{}, err
	}
	var m Measurement
	for group := 1; ; group = min(2*group, 1024) {
		start := time.Now()
		for range group {
			if err := f(); err != nil {
				return m, err
			}
		}
		if err := sync(); err != nil {
			return m, err
		}
		m.Calls += group
		m.Seconds += time.Since(start).Seconds()
		if m.Seconds >= seconds && m.Calls >= 2 {
			return m, nil
		}
	}
}

// measureCopy times copying n bytes device to device on dev (a
// conformance.DeviceCopier).
func measureCopy(dev conformance.Device, n int, seconds float64) (Measurement, error) {
	cp, ok := dev.(conformance.DeviceCopier)
	if !ok {
		return Measurement{}, errors.New("the device cannot copy device to device")
	}
	src, err := dev.Alloc(n)
	if err != nil {
		return Measurement{}, err
	}
	defer dev.Free(src)
	dst, err := dev.Alloc(n)
	if err != nil {
		return Measurement{}, err
	}
	defer dev.Free(dst)
	return measure(func() error { return cp.CopyDevice(dst, src, n) }, dev.Sync, seconds)
}
