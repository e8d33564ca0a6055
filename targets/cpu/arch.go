package cpu

import (
	"fmt"
	"strings"
)

// Arch is a CPU architecture the target prints for: its LLVM target triple
// and data layout (LLVM 14's for that triple) and its CPU levels. The IR
// is otherwise the same for every architecture: loops that opt -O3
// vectorizes for the level's SIMD, libc and pthread calls whose C types
// have the same LLVM types on every listed architecture.
type Arch struct {
	Triple     string
	DataLayout string
	// Levels are its CPU levels, baseline first (see Level).
	Levels []Level
}

// Arches are the architectures the CPU target knows; the first is the
// default.
var Arches = []Arch{
	{Triple: "x86_64-unknown-linux-gnu", DataLayout: "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128", Levels: x86Levels},
	{Triple: "aarch64-unknown-linux-gnu", DataLayout: "e-m:e-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128", Levels: aarch64Levels},
}

// DefaultTriple is the triple of the default architecture, Arches[0].
const DefaultTriple = "x86_64-unknown-linux-gnu"

// LookupArch returns the architecture of triple ("" is DefaultTriple), or
// an error naming the known triples. It is the one place a triple is
// validated.
func LookupArch(triple string) (Arch, error) {
	if triple == "" {
		triple = DefaultTriple
	}
	var known []string
	for _, a := range Arches {
		if a.Triple == triple {
			return a, nil
		}
		known = append(known, a.Triple)
	}
	return Arch{}, fmt.Errorf("unknown target triple %q (known: %s)", triple, strings.Join(known, ", "))
}
