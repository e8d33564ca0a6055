// Package emutest holds what the tests of the emulated GPU dialects
// (codegen/cuda, codegen/hip) share: their kernels' libraries, compiled
// for the CPU emulator once per source and flags in a test binary, and
// calls of the libraries' entry points under a time limit.
//
// emutest imports cpurt only; only tests import it.
package emutest

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnc/attnc/cpurt"
)

// Libs compiles a dialect's sources for the emulator and keeps each
// loaded library for the rest of the test binary (Close in TestMain).
type Libs struct {
	// Prefix starts the name of the temporary directory the sources and
	// libraries are written to ("attnc-emu-test-").
	Prefix string
	// Ext is the source files' extension (".cu", ".hip").
	Ext string
	// Compile builds the source file src into the shared library so,
	// with the extra flags Get was given.
	Compile func(src, so string, extra ...string) error

	mu    sync.Mutex
	cache map[string]*cpurt.Lib
	dir   string
}

// Get is the library of src compiled with extra, compiled and loaded on
// its first use; a failure fails the test.
func (c *Libs) Get(t testing.TB, src string, extra ...string) *cpurt.Lib {
	t.Helper()
	key := src + "\x00" + strings.Join(extra, " ")
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.cache[key]; ok {
		return l
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", c.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		c.dir = d
	}
	sub, err := os.MkdirTemp(c.dir, "k")
	if err != nil {
		t.Fatal(err)
	}
	in, so := filepath.Join(sub, "k"+c.Ext), filepath.Join(sub, "k.so")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Compile(in, so, extra...); err != nil {
		t.Fatal(err)
	}
	l, err := cpurt.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	if c.cache == nil {
		c.cache = map[string]*cpurt.Lib{}
	}
	c.cache[key] = l
	return l
}

// Close closes every library Get loaded and removes their directory.
func (c *Libs) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.cache {
		l.Close()
	}
	c.cache = nil
	if c.dir != "" {
		os.RemoveAll(c.dir)
		c.dir = ""
	}
}

// Call calls sym and fails the test if it does not return within a
// minute (a hung emulator would otherwise hang the test binary).
func Call(t testing.TB, l *cpurt.Lib, sym string, args ...int64) int32 {
	t.Helper()
	type res struct {
		rc  int32
		err error
	}
	ch := make(chan res, 1)
	go func() {
		rc, err := l.Call(sym, args...)
		ch <- res{rc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.rc
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return within a minute", sym)
	}
	return 0
}
