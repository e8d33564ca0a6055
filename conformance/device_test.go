package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
)

// The device path (upload every buffer, call with the copies, sync,
// download the outputs) gives the same results as calling the emulated
// launchers on the host buffers directly.
func TestDevicePathMatchesHost(t *testing.T) {
	t.Parallel()
	needEmu(t)
	// A tensor-core variant, a SIMT one, and one with the page kernels
	// (and an 8-bit cache's codes and scales): cudaShort variants, whose
	// libraries TestCUDAEmulatedMatrix builds too (HostLibraries compiles
	// each once).
	// (cu_ps16_f16, the tensor-core variant here until it left cudaShort,
	// had a library of its own.)
	var srcs []string
	for _, want := range []string{"cu_ps1_f32", "cu_ps256_bf16", "copy_page"} {
		for _, src := range cudaMatrix {
			if n := spec(t, src).Name; slices.Contains(cudaShort, n) && (n == want || want == "copy_page" && strings.Contains(src, "copy_page")) {
				srcs = append(srcs, src)
				break
			}
		}
	}
	if len(srcs) != 3 {
		t.Fatal("cudaShort lacks cu_ps1_f32, cu_ps256_bf16 or a variant with copy_page")
	}
	for _, src := range srcs {
		v := spec(t, src)
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			s, err := BuildCUDA(v, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			host := s.RunAll([]int{1}, 5)
			dev := NewHostDevice()
			s.Dev = dev
			viaDev := s.RunAll([]int{1}, 5)
			if len(host) != len(viaDev) || len(host) == 0 {
				t.Fatalf("%d results on the host, %d through the device", len(host), len(viaDev))
			}
			roles := map[string]bool{}
			for i, r := range viaDev {
				if !r.Pass {
					t.Errorf("through the device: %s", r)
				}
				h := host[i]
				if r.Case != h.Case || r.Kernel != h.Kernel || r.MaxErr != h.MaxErr || r.LSEErr != h.LSEErr || r.Pass != h.Pass {
					t.Errorf("device path differs from host:\n  host   %s\n  device %s", h, r)
				}
				roles[r.Kernel] = true
			}
			if len(roles) < 3 {
				t.Errorf("ran %d entries through the device, want prefill, decode, merge_state at least: %v", len(roles), roles)
			}
			if n := dev.Live(); n != 0 {
				t.Errorf("%d device allocations leaked", n)
			}
		})
	}
}

// A launcher that writes nothing fails through the device too: the outputs
// are downloaded from the device copies, not read from the host buffers.
func TestDevicePathDownloadsOutputs(t *testing.T) {
	t.Parallel()
	needEmu(t)
	v := spec(t, cudaMatrix[0])
	s, err := BuildCUDA(v, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dev := &forgetfulDevice{HostDevice: NewHostDevice()}
	s.Dev = dev
	r := s.RunAttention(ir.RolePrefill, Matrix(v)[0], 1, 1)
	if r.Pass || !strings.Contains(r.Note, "o[") {
		t.Errorf("with downloads dropped the case should fail on o, got: %s", r)
	}
	if dev.uploads == 0 {
		t.Errorf("nothing was uploaded")
	}

	// Host pointers never reach a device suite's launchers.
	cb := &caseBuffers{vals: map[string]int64{"n": 1}}
	defer cb.free()
	for _, name := range []string{"v", "s", "v_other", "s_other"} {
		cb.add(name, cpurt.NewBuffer(4*v.QOHeads*v.HeadDimV))
	}
	if _, err := s.call(ir.RoleMergeState, cb.vals); err == nil || !strings.Contains(err.Error(), "host buffers") {
		t.Errorf("call with host buffers on a device suite: %v", err)
	}
}

// forgetfulDevice uploads but never downloads.
type forgetfulDevice struct {
	*HostDevice
	uploads int
}

func (d *forgetfulDevice) Upload(dst int64, src *cpurt.Buffer) error {
	d.uploads++
	return d.HostDevice.Upload(dst, src)
}

func (d *forgetfulDevice) Download(dst *cpurt.Buffer, src int64) error { return nil }

func TestHostDevice(t *testing.T) {
	t.Parallel()
	d := NewHostDevice()
	a, err := d.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.Alloc(16)
	z, _ := d.Alloc(0)
	if a == b || a == z || z == 0 {
		t.Fatalf("allocations share addresses: %#x %#x %#x", a, b, z)
	}
	src := cpurt.U8Buffer([]byte("0123456789abcdef"))
	defer src.Free()
	if err := d.Upload(a, src); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDevice(b, a, 16); err != nil {
		t.Fatal(err)
	}
	dst := cpurt.NewBuffer(10)
	defer dst.Free()
	if err := d.Download(dst, b); err != nil {
		t.Fatal(err)
	}
	if string(dst.U8()) != "0123456789" {
		t.Errorf("round trip gave %q", dst.U8())
	}
	big := cpurt.NewBuffer(17)
	defer big.Free()
	if err := d.Upload(a, big); err == nil {
		t.Errorf("17 bytes uploaded into a 16-byte allocation")
	}
	if err := d.Download(dst, 12345); err == nil {
		t.Errorf("download from an unknown address succeeded")
	}
	for _, p := range []int64{a, b, z} {
		d.Free(p)
	}
	d.Free(a) // twice: ignored
	if d.Live() != 0 {
		t.Errorf("%d allocations live after freeing all", d.Live())
	}
	var _ DeviceCopier = d
}

// Without a GPU, OpenCUDA fails with a message that says what is missing.
func TestOpenCUDAError(t *testing.T) {
	t.Parallel()
	d, err := OpenCUDA()
	if err == nil {
		if _, ok := d.(DeviceCopier); !ok {
			t.Errorf("the CUDA device does not copy device to device")
		}
		t.Skip("a CUDA GPU is present")
	}
	if msg := err.Error(); !strings.Contains(msg, "CUDA runtime") && !strings.Contains(msg, "CUDA GPU") {
		t.Errorf("OpenCUDA error does not say what is missing: %v", err)
	}
}
