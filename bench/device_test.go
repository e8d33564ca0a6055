package bench

import (
	"strings"
	"sync"
	"testing"

	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
)

// The device path of RunDevice (inputs uploaded once, device pointers,
// timed groups ended by Sync, D2D copy baseline, output downloaded and
// checked) runs against the emulated CUDA launchers on a host-memory
// Device; attnc bench --gpu runs it on a GPU.
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
	r, err := RunDevice(s, Options{Batch: 2, KVLen: 100, QLen: 20, Seconds: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if r.Target != "cuda" || r.DecodeGBps() <= 0 || r.CopyGBps() <= 0 || r.PrefillFLOPS() <= 0 {
		t.Errorf("report:\n%s", r)
	}
	if !strings.Contains(r.String(), "target=cuda-device") || !strings.Contains(r.String(), "copy=cudaMemcpyD2D") {
		t.Errorf("report does not name the device path:\n%s", r)
	}
	dev.mu.Lock()
	if dev.copies < 3 || dev.syncs < 6 || dev.downloads != 2 {
		t.Errorf("device use: %d D2D copies, %d syncs, %d downloads", dev.copies, dev.syncs, dev.downloads)
	}
	if dev.Live() != 0 {
		t.Errorf("%d device allocations leaked", dev.Live())
	}
	dev.mu.Unlock()

	// A device that cannot copy device to device has no baseline.
	s.Dev = conformanceDeviceOnly{dev.HostDevice}
	if _, err := RunDevice(s, Options{Batch: 1, KVLen: 16, QLen: 4, Seconds: 0.001}); err == nil || !strings.Contains(err.Error(), "device to device") {
		t.Errorf("RunDevice with a device without CopyDevice: %v", err)
	}
	s.Dev = nil
	if _, err := RunDevice(s, Options{}); err == nil || !strings.Contains(err.Error(), "RunCPU") {
		t.Errorf("RunDevice without a device: %v", err)
	}
}

func TestDeviceReportArithmetic(t *testing.T) {
	v := variant(t, small)
	r := &DeviceReport{Variant: v, Target: "cuda", Opts: Options{Batch: 2, KVLen: 100, QLen: 10}.withDefaults(), Causal: true,
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
		if !near(got[0], got[1]) {
			t.Errorf("%s = %v, want %v", name, got[0], got[1])
		}
	}
	s := r.String()
	for _, want := range []string{
		"bench small target=cuda-device dtype=f16 qo_heads=4 kv_heads=2 head_dim_qk=64 head_dim_v=64 page_size=16\n",
		"decode  small batch=2 kv_len=100 calls=4 ms=500 kv_bytes=1000000000 gbps=2.00 copy=cudaMemcpyD2D copy_ms=500 copy_gbps=4.00 ratio_vs_copy=0.500 ",
		"prefill small batch=1 q_len=10 kv_len=10 causal=true calls=2 ms=500 gflops=0.00 tflops=0.0000 ratio_vs_decode=0.25\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if !causal(variant(t, strings.Replace(small, "mask causal", "mask window(left = 4)", 1))) ||
		causal(variant(t, strings.Replace(small, "mask causal", "mask none", 1))) {
		t.Errorf("causal() misclassifies window or none")
	}
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
