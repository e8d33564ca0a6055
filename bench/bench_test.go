package bench

import (
	"github.com/attnc/attnc/internal/needtool"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/attnc/attnc/build"
	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
)

// needTools skips without LLVM 14 and gcc, except in CI.
func needTools(tb testing.TB) {
	tb.Helper()
	needtool.Check(tb, cpurt.Tools())
}

const small = `variant small { heads qo = 4, kv = 2
  head_dim 64
  dtype f16
  cache paged(page_size = 16)
  mask causal }`

func variant(t testing.TB, src string) *ir.Variant {
	t.Helper()
	vs, err := frontend.Parse("bench.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return vs[0]
}

func TestMeasure(t *testing.T) {
	calls, syncs := 0, 0
	m, err := measure(func() error { calls++; return nil }, func() error { syncs++; return nil }, 0)
	if err != nil {
		t.Fatal(err)
	}
	// One warm-up call, then groups of 1 and 2 (at least two timed calls).
	if m.Calls != 3 || calls != 4 || syncs != 3 {
		t.Errorf("measure: %+v after %d calls and %d syncs", m, calls, syncs)
	}
	if m.PerCall() <= 0 || m.PerCall() != m.Seconds/3 {
		t.Errorf("PerCall = %v for %+v", m.PerCall(), m)
	}
	if (Measurement{}).PerCall() != 0 || (Measurement{}).rate(5) != 0 {
		t.Errorf("an empty measurement has a rate")
	}
}

func TestParallelCopy(t *testing.T) {
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i)
	}
	for _, chunk := range []int{0, 1, 7, 333, 1000, 5000} {
		dst := make([]byte, len(src))
		ParallelCopy(dst, src, chunk)
		if string(dst) != string(src) {
			t.Errorf("chunk %d: copy differs", chunk)
		}
	}
}

func TestReportArithmetic(t *testing.T) {
	v := variant(t, small)
	r := &Report{Variant: v, Target: "cpu", Opts: Options{Batch: 2, KVLen: 100, QLen: 10}.withDefaults(), Causal: true,
		HasDecode: true, HasPrefill: true, DecodeKV: 1e9,
		Decode: Measurement{Calls: 4, Seconds: 2}, Copy: Measurement{Calls: 1, Seconds: 0.5}, Prefill: Measurement{Calls: 2, Seconds: 1}}
	for name, got := range map[string][2]float64{
		"DecodeGBps":  {r.DecodeGBps(), 2},   // 1e9 bytes in 0.5 s
		"CopyGBps":    {r.CopyGBps(), 4},     // read + write of 1e9 bytes in 0.5 s
		"RatioVsCopy": {r.RatioVsCopy(), .5}, //
		// 2·q·kv·heads·(dqk+dv) / 2 = 10·10·4·128
		"PrefillFLOPs": {r.PrefillFLOPs(), 51200},
		"DecodeFLOPs":  {r.DecodeFLOPs(), 2 * 2 * 100 * 4 * 128},
		"RatioVsDec":   {r.RatioVsDecode(), 51200 / 0.5 / (2 * 2 * 100 * 4 * 128 / 0.5)},
	} {
		if d := got[0] - got[1]; d > 1e-9*got[1] || d < -1e-9*got[1] {
			t.Errorf("%s = %v, want %v", name, got[0], got[1])
		}
	}
	s := r.String()
	for _, re := range []string{
		`(?m)^bench small target=cpu threads=0 dtype=f16 qo_heads=4 kv_heads=2 head_dim_qk=64 head_dim_v=64 page_size=16$`,
		`(?m)^decode  small batch=2 kv_len=100 calls=4 ms=500 kv_bytes=1000000000 gbps=2.00 copy=memmove\(0 threads\) copy_ms=500 copy_gbps=4.00 ratio_vs_copy=0.500 `,
		`(?m)^prefill small batch=1 q_len=10 kv_len=10 causal=true calls=2 ms=500 gflops=0.00 tflops=0.0000 ratio_vs_decode=0.25$`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("report does not match %s:\n%s", re, s)
		}
	}
	if !causal(variant(t, strings.Replace(small, "mask causal", "mask window(left = 4)", 1))) ||
		causal(variant(t, strings.Replace(small, "mask causal", "mask none", 1))) {
		t.Errorf("causal() misclassifies window or none")
	}
}

// blockTable has a vLLM block table and learned sinks: the workload passes
// block_table, max_blocks, kv_lens and sinks.
const blockTable = `variant bt { heads qo = 4, kv = 1
  head_dim 64
  dtype bf16
  cache paged(page_size = 8, layout = NHD, table = block_table)
  mask window(left = 50)
  sinks learned }`

func TestRunCPU(t *testing.T) {
	needTools(t)
	for _, tc := range []struct {
		src    string
		kv     int64 // K+V bytes of 3 sequences of 300 tokens
		causal bool
	}{
		{small, 3 * 300 * 2 * 128 * 2, true},
		{blockTable, 3 * 300 * 1 * 128 * 2, true},
	} {
		v := variant(t, tc.src)
		t.Run(v.Name, func(t *testing.T) {
			s, err := conformance.Build(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r, err := Run(s, Options{Batch: 3, KVLen: 300, QLen: 40, Threads: 2, Seconds: 0.02})
			if err != nil {
				t.Fatal(err)
			}
			if r.Threads != 2 || !r.HasDecode || !r.HasPrefill || r.Device || r.Causal != tc.causal {
				t.Errorf("report: %+v", r)
			}
			if r.DecodeKV != tc.kv {
				t.Errorf("DecodeKV = %d, want %d", r.DecodeKV, tc.kv)
			}
			if r.DecodeGBps() <= 0 || r.CopyGBps() <= 0 || r.PrefillFLOPS() <= 0 || r.Decode.Calls < 2 || r.Prefill.Calls < 2 {
				t.Errorf("no rates:\n%s", r)
			}
			t.Logf("\n%s", r)
		})
	}
}

// The device path of Run (inputs uploaded once, device pointers, timed
// groups ended by Sync, D2D copy baseline, output downloaded and checked)
// runs against the emulated CUDA launchers on a host-memory Device.
func TestRunDevicePath(t *testing.T) {
	_, err := cuda.GXX()
	needtool.Check(t, err)
	s, err := conformance.BuildCUDA(variant(t, small), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dev := &countingDevice{HostDevice: conformance.NewHostDevice()}
	s.Dev = dev
	r, err := Run(s, Options{Batch: 2, KVLen: 100, QLen: 20, Seconds: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Device || r.Target != "cuda" || r.DecodeGBps() <= 0 || r.CopyGBps() <= 0 || r.PrefillFLOPS() <= 0 {
		t.Errorf("report:\n%s", r)
	}
	if !strings.Contains(r.String(), "target=cuda-device") || !strings.Contains(r.String(), "copy=cudaMemcpyD2D") {
		t.Errorf("report does not name the device path:\n%s", r)
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.copies < 3 || dev.syncs < 6 || dev.downloads != 2 {
		t.Errorf("device use: %d D2D copies, %d syncs, %d downloads", dev.copies, dev.syncs, dev.downloads)
	}
	if dev.Live() != 0 {
		t.Errorf("%d device allocations leaked", dev.Live())
	}

	// A device that cannot copy device to device has no baseline.
	s.Dev = conformanceDeviceOnly{dev.HostDevice}
	if _, err := Run(s, Options{Batch: 1, KVLen: 16, QLen: 4, Seconds: 0.001}); err == nil || !strings.Contains(err.Error(), "device to device") {
		t.Errorf("Run with a device without CopyDevice: %v", err)
	}
}

type countingDevice struct {
	*conformance.HostDevice
	mu                       sync.Mutex
	copies, syncs, downloads int
}

func (d *countingDevice) CopyDevice(dst, src int64, n int) error {
	d.mu.Lock()
	d.copies++
	d.mu.Unlock()
	return d.HostDevice.CopyDevice(dst, src, n)
}

func (d *countingDevice) Sync() error {
	d.mu.Lock()
	d.syncs++
	d.mu.Unlock()
	return nil
}

func (d *countingDevice) Download(dst *cpurt.Buffer, src int64) error {
	d.mu.Lock()
	d.downloads++
	d.mu.Unlock()
	return d.HostDevice.Download(dst, src)
}

// conformanceDeviceOnly hides HostDevice's CopyDevice.
type conformanceDeviceOnly struct{ conformance.Device }

// builtSuite is an example built once for the benchmarks.
type builtSuite struct {
	once sync.Once
	s    *conformance.Suite
	err  error
}

var llama3, streaming builtSuite

// suite builds examples/<name>.attn once.
func (bs *builtSuite) suite(b *testing.B, name string) *conformance.Suite {
	needTools(b)
	bs.once.Do(func() {
		var vs []*ir.Variant
		vs, bs.err = build.ParseSpecs([]string{"../examples/" + name + ".attn"})
		if bs.err != nil {
			return
		}
		dir, err := os.MkdirTemp("", "attnc-bench-")
		if err != nil {
			bs.err = err
			return
		}
		bs.s, bs.err = conformance.Build(vs[0], dir)
	})
	if bs.err != nil {
		b.Fatal(bs.err)
	}
	return bs.s
}

func llama3Suite(b *testing.B) *conformance.Suite { return llama3.suite(b, "llama3_8b") }

// BenchmarkWindowedCPU times the windowed case, llama2_streaming
// (window(left = 1019) + sinks tokens(4)), where the window is shorter than
// the cache: decode of 8 sequences of 4096 tokens and prefill of 2048 new
// tokens over 4096, with all threads. Its partially masked tiles (the
// sinks' tile, each window's left edge, prefill's diagonal) select instead
// of multiplying by a zero weight; ms per call is the figure to compare.
func BenchmarkWindowedCPU(b *testing.B) {
	s := streaming.suite(b, "llama2_streaming")
	if err := s.SetThreads(0); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		role ir.Role
		sh   shape
	}{
		{"decode", ir.RoleDecode, decodeShape(Options{Batch: 8, KVLen: 4096})},
		{"prefill", ir.RolePrefill, shape{qLens: []int{2048}, kvLens: []int{4096}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			w, err := newWorkload(s, c.role, c.sh, 3)
			if err != nil {
				b.Fatal(err)
			}
			defer w.free()
			if err := w.call(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := w.call(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := w.checkOutput(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/call")
		})
	}
}

// BenchmarkDecodeCPU times llama3_8b's decode entry on 8 sequences of 4096
// cached tokens with all threads, and reports the K+V bandwidth and its
// ratio to a same-size parallel copy measured in the same process.
func BenchmarkDecodeCPU(b *testing.B) {
	s := llama3Suite(b)
	o := Options{}.withDefaults()
	if err := s.SetThreads(0); err != nil {
		b.Fatal(err)
	}
	threads, _ := s.Lib.Call(s.Prefix + "_get_num_threads")
	w, err := newWorkload(s, ir.RoleDecode, decodeShape(o), 1)
	if err != nil {
		b.Fatal(err)
	}
	defer w.free()
	cp, err := measureCopy(nil, int(w.kvBytes), int(threads), 0.5)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.call(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(w.kvBytes)
	b.ResetTimer()
	for range b.N {
		if err := w.call(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := w.checkOutput(); err != nil {
		b.Fatal(err)
	}
	gbps := float64(w.kvBytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	copyGBps := cp.rate(2*float64(w.kvBytes)) / 1e9
	b.ReportMetric(gbps, "GB/s")
	b.ReportMetric(copyGBps, "copy_GB/s")
	b.ReportMetric(gbps/copyGBps, "ratio_vs_copy")
}

// BenchmarkPrefillCPU times llama3_8b's prefill entry on one sequence of
// 1024 new tokens (causal) with all threads and reports GFLOP/s.
func BenchmarkPrefillCPU(b *testing.B) {
	s := llama3Suite(b)
	o := Options{}.withDefaults()
	if err := s.SetThreads(0); err != nil {
		b.Fatal(err)
	}
	w, err := newWorkload(s, ir.RolePrefill, prefillShape(o), 2)
	if err != nil {
		b.Fatal(err)
	}
	defer w.free()
	if err := w.call(); err != nil {
		b.Fatal(err)
	}
	r := &Report{Variant: s.V, Opts: o, Causal: causal(s.V)}
	b.ResetTimer()
	for range b.N {
		if err := w.call(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := w.checkOutput(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.PrefillFLOPs()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
