package cpurt

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// Buffer is kernel-visible memory from mmap. Its data ends exactly at a page
// boundary followed by a PROT_NONE guard page (and a guard page precedes the
// first data page), so an access past either end faults.
type Buffer struct {
	mem  []byte // whole mapping, guards included
	data []byte // the usable bytes
	addr uintptr
}

// NewBuffer maps a zeroed buffer of n bytes. n = 0 yields a buffer whose
// address is the guard page itself. It panics with an *AllocError if the
// memory cannot be mapped (RecoverAlloc turns that into an error).
func NewBuffer(n int) *Buffer {
	b, err := newBuffer(n, 0)
	if err != nil {
		panic(err)
	}
	return b
}

// AllocError is a buffer the system would not map: out of memory, or an
// address-space limit (ulimit -v).
type AllocError struct {
	Bytes int // the mapping's size, guard pages included
	Op    string
	Err   error
}

func (e *AllocError) Error() string {
	return fmt.Sprintf("cpurt: cannot allocate a %d-byte buffer (%s: %v)", e.Bytes, e.Op, e.Err)
}

func (e *AllocError) Unwrap() error { return e.Err }

// RecoverAlloc, deferred, turns a panic of NewBuffer (an *AllocError) into
// *err, so that a caller reports running out of memory as an error; any
// other panic goes on.
func RecoverAlloc(err *error) {
	if r := recover(); r != nil {
		if ae, ok := r.(*AllocError); ok {
			*err = ae
			return
		}
		panic(r)
	}
}

// NewSparseBuffer is NewBuffer for a huge buffer of which a test touches
// only a few pages (rows past 2^31 elements): the mapping reserves no
// memory (MAP_NORESERVE), so only the pages written cost any. It fails
// where the system refuses such a mapping.
func NewSparseBuffer(n int) (*Buffer, error) { return newBuffer(n, syscall.MAP_NORESERVE) }

func newBuffer(n, flags int) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpurt: NewBuffer(%d)", n)
	}
	ps := os.Getpagesize()
	dataPages := (n + ps - 1) / ps
	total := (dataPages + 2) * ps
	mem, err := syscall.Mmap(-1, 0, total, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|flags)
	if err != nil {
		return nil, &AllocError{Bytes: total, Op: "mmap", Err: err}
	}
	if dataPages > 0 {
		if err := syscall.Mprotect(mem[ps:ps+dataPages*ps], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			syscall.Munmap(mem)
			return nil, &AllocError{Bytes: total, Op: "mprotect", Err: err}
		}
	}
	end := ps + dataPages*ps
	b := &Buffer{mem: mem, data: mem[end-n : end : end]}
	b.addr = uintptr(unsafe.Pointer(&mem[0])) + uintptr(end-n)
	return b, nil
}

// AdviseHugePages asks Linux to back b's data with transparent huge pages
// (madvise MADV_HUGEPAGE), as a host whose THP mode is "always" would
// unasked; it changes no byte, only the page size the kernel may map. Call
// it before the first write: pages already touched stay small.
func (b *Buffer) AdviseHugePages() error {
	if b == nil || len(b.mem) == 0 {
		return nil
	}
	ps := os.Getpagesize()
	if len(b.mem) <= 2*ps {
		return nil
	}
	return syscall.Madvise(b.mem[ps:len(b.mem)-ps], syscall.MADV_HUGEPAGE)
}

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int {
	if b == nil {
		return 0
	}
	return len(b.data)
}

// Ptr is the address to pass to a kernel; a nil *Buffer gives 0 (NULL).
func (b *Buffer) Ptr() int64 {
	if b == nil || b.mem == nil {
		return 0
	}
	return int64(b.addr)
}

func view[T any](b *Buffer) []T {
	var z T
	sz := int(unsafe.Sizeof(z))
	if b == nil || len(b.data) < sz {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b.data[0])), len(b.data)/sz)
}

// U8 views the buffer as bytes.
func (b *Buffer) U8() []byte {
	if b == nil {
		return nil
	}
	return b.data
}

// U16 views the buffer as uint16 (f16 and bf16 bit patterns).
func (b *Buffer) U16() []uint16 { return view[uint16](b) }

// I32 views the buffer as int32.
func (b *Buffer) I32() []int32 { return view[int32](b) }

// F32 views the buffer as float32.
func (b *Buffer) F32() []float32 { return view[float32](b) }

// Free unmaps the buffer; views taken earlier become invalid. Freeing twice
// is harmless.
func (b *Buffer) Free() {
	if b == nil || b.mem == nil {
		return
	}
	syscall.Munmap(b.mem)
	b.mem, b.data, b.addr = nil, nil, 0
}

// F32Buffer returns a buffer holding xs.
func F32Buffer(xs []float32) *Buffer {
	b := NewBuffer(4 * len(xs))
	copy(b.F32(), xs)
	return b
}

// I32Buffer returns a buffer holding xs.
func I32Buffer(xs []int32) *Buffer {
	b := NewBuffer(4 * len(xs))
	copy(b.I32(), xs)
	return b
}

// U16Buffer returns a buffer holding xs.
func U16Buffer(xs []uint16) *Buffer {
	b := NewBuffer(2 * len(xs))
	copy(b.U16(), xs)
	return b
}

// U8Buffer returns a buffer holding xs.
func U8Buffer(xs []byte) *Buffer {
	b := NewBuffer(len(xs))
	copy(b.U8(), xs)
	return b
}
