package attnc_test

import (
	"strings"
	"testing"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/registry"
)

// TestSelectBounds: Result.Select refuses shapes outside the bounds the
// command line's flags have (threads, multiprocessors, lengths), with the
// bound in the error, before evaluating any plan.
func TestSelectBounds(t *testing.T) {
	r := compile(t, causalSpec, attnc.Options{Targets: []string{"cpu", "cuda"}})
	one := func(s registry.Shape) registry.Shape {
		if s.QLens == nil {
			s.QLens, s.KVLens = []int{1}, []int{4096}
		}
		return s
	}
	for _, c := range []struct {
		target string
		s      registry.Shape
		want   string
	}{
		{"cpu", one(registry.Shape{Threads: 0}), "threads 0 is out of range: the kernels use at most this many threads, 1..1024"},
		{"cpu", one(registry.Shape{Threads: -3}), "threads -3 is out of range"},
		{"cpu", one(registry.Shape{Threads: 5000}), "threads 5000 is out of range"},
		{"cpu", one(registry.Shape{Threads: 4, SMs: -1}), "sms -1 is out of range"},
		{"cuda", one(registry.Shape{SMs: 0}), "sms 0 is out of range"},
		{"cuda", one(registry.Shape{SMs: -1}), "sms -1 is out of range"},
		{"cuda", one(registry.Shape{SMs: 1 << 20}), "sms 1048576 is out of range"},
		{"cuda", one(registry.Shape{SMs: 4, Threads: -1}), "threads -1 is out of range"},
		{"cpu", registry.Shape{QLens: []int{-1}, KVLens: []int{-5}, Threads: 4}, "sequence 0: q_len -1 is out of range: a sequence holds at most 2^30 tokens, 0..1073741824"},
		{"cpu", registry.Shape{QLens: []int{1, 1}, KVLens: []int{8, -5}, Threads: 4}, "sequence 1: kv_len -5 is out of range"},
		{"cpu", registry.Shape{QLens: []int{1}, KVLens: []int{1 << 31}, Threads: 4}, "kv_len 2147483648 is out of range"},
		{"cpu", registry.Shape{QLens: []int{1}, KVLens: []int{8}, Batch: -2, Threads: 4}, "batch -2 is out of range"},
		{"cpu", registry.Shape{QLens: []int{1}, KVLens: []int{8}, Batch: 1 << 31, Threads: 4}, "batch 2147483648 is out of range: batch_size is an int32_t"},
	} {
		_, err := r.Select("win", c.target, c.s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: %v, want %q", c.target, c.s, err, c.want)
		}
	}
	for _, c := range []struct {
		target string
		s      registry.Shape
	}{
		{"cpu", one(registry.Shape{Threads: 1})},
		{"cpu", one(registry.Shape{Threads: 1024})},
		{"cpu", registry.Shape{Threads: 2}},
		{"cuda", one(registry.Shape{SMs: 1})},
		{"cuda", one(registry.Shape{SMs: 132})},
	} {
		if _, err := r.Select("win", c.target, c.s); err != nil {
			t.Errorf("%s %+v: %v", c.target, c.s, err)
		}
	}
}

// TestSelectionString: a selection prints as attnc explain prints it.
func TestSelectionString(t *testing.T) {
	r, err := attnc.Compile("tiny.attn", []byte(tinySpec), attnc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Select("tiny", "cpu", registry.Shape{QLens: []int{1}, KVLens: []int{4096}, Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "decode via tiny_decode, 16 work items, KV split in 8 chunks, merged with merge_state"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestCompileNothingIsAnError: a spec without a variant, or no variants,
// is an error, not a manifest with "variants": null.
func TestCompileNothingIsAnError(t *testing.T) {
	if r, err := attnc.Compile("e.attn", []byte("// nothing\n"), attnc.Options{}); err == nil || !strings.HasPrefix(err.Error(), "e.attn:1:1: the spec has no variant") {
		t.Errorf("Compile of an empty spec: %v, %v", r, err)
	}
	if r, err := attnc.CompileVariants(nil, attnc.Options{}); err == nil || !strings.Contains(err.Error(), "no variant to build") {
		t.Errorf("CompileVariants(nil): %v, %v", r, err)
	}
}
