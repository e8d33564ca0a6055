package frontend

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestParseEachReportsEveryVariant: one bad variant does not hide the
// others, and every independent error of a variant is reported, each at
// its own position.
func TestParseEachReportsEveryVariant(t *testing.T) {
	src := `variant a {
  heads qo = 8
  head_dim 64
}
variant b {
  heads qo = 8, kv = 3
  head_dims 64
  dtype f61
}
variant c {
  heads qo = 8
  head_dim 64
  cache paged(page_size = 3)
}
variant d {
  heads qo = 4
  head_dim 32
}
`
	cs, err := ParseEach("m.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		if c.Variant != nil {
			got = append(got, "ok "+c.Variant.Name)
		}
		for _, e := range c.Errs {
			got = append(got, e.Error())
		}
	}
	want := []string{
		"ok a",
		"m.attn:6:22: kv heads (3) must divide qo heads (8)",
		`m.attn:7:3: unknown setting "head_dims" (did you mean head_dim?)`,
		`m.attn:8:9: unknown dtype "f61" (known: f32, f16, bf16)`,
		"m.attn:13:27: page_size 3 is not valid: use a power of two from 1 to 256 (1, 2, 4, ..., 256)",
		"ok d",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Parse keeps its contract: the first error in source order.
	if _, err := Parse("m.attn", []byte(src)); err == nil || err.Error() != want[1] {
		t.Errorf("Parse: %v, want %s", err, want[1])
	}
}

// TestClosestSetting: a suggestion only for a likely misspelling.
func TestClosestSetting(t *testing.T) {
	for w, want := range map[string]string{
		"head_dims": "head_dim", "heds": "heads", "dtpye": "dtype", "kernel": "kernels",
		"masks": "mask", "foo": "", "x": "", "cachez": "cache", "rop": "rope", "unrelated": "",
	} {
		if got := closest(w, settings); got != want {
			t.Errorf("closest(%q) = %q, want %q", w, got, want)
		}
	}
}

// TestReadSpecRefusesFIFO: a named pipe with no writer is refused at once
// (reading it would wait forever), the error naming it; so is a directory.
func TestReadSpecRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.attn")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for path, kind := range map[string]string{fifo: "a named pipe", dir: "a directory"} {
		done := make(chan error, 1)
		go func() {
			_, err := ParseFile(path)
			done <- err
		}()
		select {
		case err := <-done:
			want := path + ": not a regular file (" + kind + "); a spec is read from a regular file"
			if err == nil || err.Error() != want {
				t.Errorf("got %v, want %s", err, want)
			}
		case <-time.After(5 * time.Second):
			// Unblock the reader so that the test ends.
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			t.Fatalf("%s: ParseFile still blocked after 5 s", path)
		}
	}
}
