package conformance

import (
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets"
)

// Device is the memory of the accelerator a Suite's launchers run on. With
// Suite.Dev set, every case's buffers are copied to device memory before the
// call, the launcher gets device pointers, and the outputs are copied back
// after Sync. Addresses are opaque int64s, passed to launchers as they are.
type Device interface {
	// Alloc returns n bytes of device memory (n may be 0).
	Alloc(n int) (int64, error)
	// Upload copies src.Len() bytes of host memory to dst.
	Upload(dst int64, src *cpurt.Buffer) error
	// Download copies dst.Len() bytes of device memory at src into dst.
	Download(dst *cpurt.Buffer, src int64) error
	// Free releases memory from Alloc.
	Free(int64)
	// Sync waits for all work queued on the device and reports a
	// failure of that work (a faulting kernel).
	Sync() error
}

// DeviceCopier is a Device that also copies device memory to device memory
// (cudaMemcpy with kind cudaMemcpyDeviceToDevice): the bandwidth baseline
// of `attnc bench --gpu`.
type DeviceCopier interface {
	Device
	CopyDevice(dst, src int64, n int) error
}

// HostDevice is a Device whose memory is host memory: every Alloc is a
// fresh guard-paged cpurt.Buffer and copies are memmoves. It runs the
// device path of a Suite (upload, call with the copies' addresses,
// download) without a GPU, e.g. with the emulated CUDA launchers.
type HostDevice struct {
	mu   sync.Mutex
	bufs map[int64]*cpurt.Buffer
}

// NewHostDevice returns an empty HostDevice.
func NewHostDevice() *HostDevice { return &HostDevice{bufs: map[int64]*cpurt.Buffer{}} }

// Alloc maps a new buffer of n bytes. Zero-byte allocations get one byte,
// so that every allocation has its own address.
func (d *HostDevice) Alloc(n int) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("host device: alloc %d bytes", n)
	}
	b := cpurt.NewBuffer(max(n, 1))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bufs[b.Ptr()] = b
	return b.Ptr(), nil
}

func (d *HostDevice) buf(p int64, n int) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.bufs[p]
	if !ok {
		return nil, fmt.Errorf("host device: %#x is not an allocation", p)
	}
	if n > b.Len() {
		return nil, fmt.Errorf("host device: %d bytes do not fit the %d-byte allocation %#x", n, b.Len(), p)
	}
	return b.U8()[:n], nil
}

// Upload copies src into the allocation dst.
func (d *HostDevice) Upload(dst int64, src *cpurt.Buffer) error {
	m, err := d.buf(dst, src.Len())
	if err != nil {
		return err
	}
	copy(m, src.U8())
	return nil
}

// Download copies the start of the allocation src into dst.
func (d *HostDevice) Download(dst *cpurt.Buffer, src int64) error {
	m, err := d.buf(src, dst.Len())
	if err != nil {
		return err
	}
	copy(dst.U8(), m)
	return nil
}

// CopyDevice copies n bytes between two allocations.
func (d *HostDevice) CopyDevice(dst, src int64, n int) error {
	to, err := d.buf(dst, n)
	if err != nil {
		return err
	}
	from, err := d.buf(src, n)
	if err != nil {
		return err
	}
	copy(to, from)
	return nil
}

// Free unmaps an allocation; unknown addresses are ignored.
func (d *HostDevice) Free(p int64) {
	d.mu.Lock()
	b := d.bufs[p]
	delete(d.bufs, p)
	d.mu.Unlock()
	b.Free()
}

// Live is the number of allocations not freed yet.
func (d *HostDevice) Live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.bufs)
}

// Sync has nothing to wait for: the emulator runs a grid before its
// launch returns.
func (d *HostDevice) Sync() error { return nil }

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// Memcpy kinds of the runtime API (targets.DeviceRuntime).
const (
	memcpyH2D = 1
	memcpyD2H = 2
	memcpyD2D = 3
)

// runtimeDevice is an accelerator runtime library (libcudart; any with the
// CUDA runtime's API under a prefix, targets.DeviceRuntime) called through
// cpurt.Lib: every function used takes integers and pointers and returns
// its status.
type runtimeDevice struct {
	rt  targets.DeviceRuntime
	lib *cpurt.Lib
	mu  sync.Mutex    // guards out
	out *cpurt.Buffer // 8 bytes: the out-parameter of Malloc
}

var (
	devicesMu sync.Mutex
	devices   = map[string]*openedDevice{} // by runtime prefix
)

type openedDevice struct {
	dev *runtimeDevice
	err error
}

// OpenCUDA loads the CUDA runtime (libcudart.so, .so.13, .so.12 or .so.11.0, from
// the loader's path, $CUDA_HOME/lib64 or /usr/local/cuda/lib64) and checks
// that it sees at least one GPU: OpenDevice of the cuda target.
func OpenCUDA() (Device, error) { return OpenDevice("cuda") }

// OpenDevice loads the device runtime of the target named
// (targets.DeviceHarness.DeviceRuntime) and checks that it sees at least
// one device. The runtime stays loaded for the life of the process; later
// calls return the same Device. Device memory is that of the current
// device (device 0 unless the process changed it), the one the launchers
// run on.
func OpenDevice(target string) (Device, error) {
	_, h, err := harnessOf(target)
	if err != nil {
		return nil, err
	}
	dh, ok := h.(targets.DeviceHarness)
	if !ok {
		return nil, fmt.Errorf("conformance: target %s runs on no device", target)
	}
	rt := dh.DeviceRuntime()
	devicesMu.Lock()
	defer devicesMu.Unlock()
	o, ok := devices[rt.Prefix]
	if !ok {
		o = &openedDevice{}
		o.dev, o.err = openRuntime(rt)
		devices[rt.Prefix] = o
	}
	if o.err != nil {
		return nil, o.err
	}
	return o.dev, nil
}

func openRuntime(rt targets.DeviceRuntime) (*runtimeDevice, error) {
	cands := append([]string(nil), rt.Libs...)
	for _, d := range rt.Dirs {
		for _, n := range rt.Libs {
			if p := filepath.Join(d, n); fileExists(p) {
				cands = append(cands, p)
			}
		}
	}
	var first error
	var lib *cpurt.Lib
	for _, c := range cands {
		l, err := cpurt.Open(c)
		if err == nil {
			lib = l
			break
		}
		if first == nil {
			first = err
		}
	}
	if lib == nil {
		return nil, fmt.Errorf("conformance: cannot load the %s runtime (tried %s; %s): %v",
			rt.Name, strings.Join(cands, ", "), rt.Install, first)
	}
	d := &runtimeDevice{rt: rt, lib: lib, out: cpurt.NewBuffer(8)}
	// GetDeviceCount(int *count)
	st, err := lib.Call(rt.Prefix+"GetDeviceCount", d.out.Ptr())
	if err != nil {
		return nil, fmt.Errorf("conformance: %v", err)
	}
	if st != 0 {
		return nil, fmt.Errorf("conformance: no usable %s GPU: %sGetDeviceCount: %s", rt.Name, rt.Prefix, d.errString(st))
	}
	if n := d.out.I32()[0]; n < 1 {
		return nil, fmt.Errorf("conformance: no %s GPU found (%sGetDeviceCount = %d)", rt.Name, rt.Prefix, n)
	}
	return d, nil
}

func (d *runtimeDevice) errString(code int32) string {
	return fmt.Sprintf("%s (%sError %d)", d.lib.CallStr(d.rt.Prefix+"GetErrorString", code), d.rt.Prefix, code)
}

// check turns a status into an error naming the call.
func (d *runtimeDevice) check(what string, st int32, err error) error {
	if err != nil {
		return fmt.Errorf("conformance: %s: %v", what, err)
	}
	if st != 0 {
		return fmt.Errorf("conformance: %s: %s", what, d.errString(st))
	}
	return nil
}

func (d *runtimeDevice) Alloc(n int) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("conformance: %sMalloc(%d)", d.rt.Prefix, n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Malloc(void **p, size_t n); at least one byte, so that every
	// buffer, even an empty one, has a distinct non-NULL address.
	st, err := d.lib.Call(d.rt.Prefix+"Malloc", d.out.Ptr(), int64(max(n, 1)))
	if err := d.check(fmt.Sprintf("%sMalloc(%d)", d.rt.Prefix, n), st, err); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(d.out.U8())), nil
}

func (d *runtimeDevice) memcpy(dst, src int64, n int, kind int64) error {
	if n == 0 {
		return nil
	}
	// Memcpy(void *dst, const void *src, size_t n, kind)
	st, err := d.lib.Call(d.rt.Prefix+"Memcpy", dst, src, int64(n), kind)
	return d.check(fmt.Sprintf("%sMemcpy(%d bytes, kind %d)", d.rt.Prefix, n, kind), st, err)
}

func (d *runtimeDevice) Upload(dst int64, src *cpurt.Buffer) error {
	return d.memcpy(dst, src.Ptr(), src.Len(), memcpyH2D)
}

func (d *runtimeDevice) Download(dst *cpurt.Buffer, src int64) error {
	return d.memcpy(dst.Ptr(), src, dst.Len(), memcpyD2H)
}

func (d *runtimeDevice) CopyDevice(dst, src int64, n int) error {
	return d.memcpy(dst, src, n, memcpyD2D)
}

func (d *runtimeDevice) Free(p int64) {
	if p != 0 {
		d.lib.Call(d.rt.Prefix+"Free", p) //nolint:errcheck // nothing to do about a failed free
	}
}

func (d *runtimeDevice) Sync() error {
	st, err := d.lib.Call(d.rt.Prefix + "DeviceSynchronize")
	return d.check(d.rt.Prefix+"DeviceSynchronize", st, err)
}

// BuildCUDADeviceWith prints v's CUDA source, built with the options o,
// into dir, compiles it with nvcc into a shared library, loads it and
// opens the CUDA runtime (OpenCUDA): a Suite whose cases run on the GPU,
// through Dev. The library stays loaded until the process exits (see
// Suite.Close).
func BuildCUDADeviceWith(v *ir.Variant, dir, nvcc string, o Options) (*Suite, error) {
	dev, err := OpenCUDA()
	if err != nil {
		return nil, err
	}
	return BuildDeviceFor(v, "cuda", dir, nvcc, dev, o)
}

// BuildDeviceFor compiles v for the target named into dir, builds the
// files it writes with the target's device compiler (compiler, from
// targets.DeviceHarness.DeviceTools) into a library that runs them on the
// device whose memory dev is, and loads it. The library stays loaded
// until the process exits (see Suite.Close).
func BuildDeviceFor(v *ir.Variant, target, dir, compiler string, dev Device, o Options) (*Suite, error) {
	t, h, err := harnessOf(target)
	if err != nil {
		return nil, err
	}
	dh, ok := h.(targets.DeviceHarness)
	if !ok {
		return nil, fmt.Errorf("target %s has no device harness: its kernels cannot run on an accelerator here", target)
	}
	c, err := compileFor(v, t.Name(), dir, o)
	if err != nil {
		return nil, err
	}
	so, err := dh.DeviceLibrary(v, c.Final, dir, compiler)
	if err != nil {
		return nil, err
	}
	s := newSuite(v, t, h, c.Lowered, c.Final)
	if s.Lib, err = cpurt.Open(so); err != nil {
		return nil, err
	}
	s.Dev, s.keepLoaded = dev, true
	return s, nil
}

// Call runs the role's entry with the arguments named in vals (pointers as
// addresses, scalars as values), in the entry's parameter order; a CUDA
// launcher gets stream 0. With Dev set, buffer addresses must be device
// addresses. It returns the entry's status.
func (s *Suite) Call(role ir.Role, vals map[string]int64) (int32, error) {
	return s.callEntry(role, vals)
}

// call is callEntry on host buffers: with Dev set it refuses, rather than
// hand host pointers to a GPU (the fault would poison the CUDA context for
// the rest of the process). Checks that copy a case's buffers call run.
func (s *Suite) call(role ir.Role, vals map[string]int64) (int32, error) {
	if s.Dev != nil {
		return 0, fmt.Errorf("%s: %s gets host buffers but the suite runs on a device (use Suite.run)", s.V.Name, role)
	}
	return s.callEntry(role, vals)
}

// Close unloads the suite's library, except one built by nvcc, which stays
// loaded: unloading a library with the CUDA runtime linked in while the
// process keeps using the GPU is not safe.
func (s *Suite) Close() error {
	if s.keepLoaded {
		return nil
	}
	return s.Lib.Close()
}

// run calls role's entry on the case's buffers: directly, or with Dev set,
// on device copies of every buffer argument (NULL stays NULL), downloading
// the buffers the entry writes after the call and Sync.
func (s *Suite) run(role ir.Role, cb *caseBuffers) (st int32, err error) {
	e, ok := s.Entries[role]
	if !ok {
		return 0, fmt.Errorf("%s: no %s entry", s.V.Name, role)
	}
	if s.Dev == nil {
		// Every buffer the kernel gets must be one of the case's guarded
		// buffers (cpurt.Buffer: a PROT_NONE page right after its last
		// byte), so that any read or write past it faults.
		for _, p := range e.Params {
			if !p.Buffer || (p.Null && cb.vals[p.Name] == 0) {
				continue
			}
			if b := cb.byName[p.Name]; b == nil || b.Ptr() != cb.vals[p.Name] {
				return 0, fmt.Errorf("%s: argument %s is not a guarded buffer of the case", e.Symbol, p.Name)
			}
		}
		if s.callHook != nil {
			return s.callHook(cb, func() (int32, error) { return s.callEntry(role, cb.vals) })
		}
		return s.callEntry(role, cb.vals)
	}
	vals := maps.Clone(cb.vals)
	type copied struct {
		host *cpurt.Buffer
		dev  int64
		out  bool
	}
	var cs []copied
	defer func() {
		for _, c := range cs {
			s.Dev.Free(c.dev)
		}
	}()
	for _, p := range e.Params {
		if !p.Buffer || vals[p.Name] == 0 {
			continue
		}
		b := cb.byName[p.Name]
		if b == nil || b.Ptr() != vals[p.Name] {
			return 0, fmt.Errorf("%s: argument %s is not one of the case's buffers", e.Symbol, p.Name)
		}
		d, err := s.Dev.Alloc(b.Len())
		if err != nil {
			return 0, err
		}
		cs = append(cs, copied{b, d, p.Output})
		if err := s.Dev.Upload(d, b); err != nil {
			return 0, err
		}
		vals[p.Name] = d
	}
	st, err = s.callEntry(role, vals)
	if err != nil {
		return st, err
	}
	if err := s.Dev.Sync(); err != nil {
		return st, err
	}
	for _, c := range cs {
		if c.out {
			if err := s.Dev.Download(c.host, c.dev); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}
