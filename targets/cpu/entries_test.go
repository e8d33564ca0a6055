package cpu

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestAssembleKeepsOutputsUntouched: Assemble refuses a plan whose work
// kernels could write an entry buffer before a later allocation fails — a
// launch before the last one writing it, or a write outside the kernel's
// last parallel loop — and accepts the split-KV shape (chunks into scratch,
// then the merge writing o), whose entry returns the launches' status.
func TestAssembleKeepsOutputsUntouched(t *testing.T) {
	const kernels = `module t prefix t

kernel t_chunks role decode (part: f32* [8], n: i32) {
  for item in 0 .. n parallel @work {
    store part[item] = 1.0:f32
  }
  return 0
}

kernel t_merge role decode (part: f32* [8], o: f32* [8] out, n: i32) {
  for item in 0 .. n parallel @work {
    store o[item] = part[item]
  }
  return 0
}

kernel t_early role decode (o: f32* [8] out, n: i32) {
  store o[0] = 0.0:f32
  for item in 0 .. n parallel @work {
    store o[item] = 1.0:f32
  }
  return 0
}

kernel t_direct role decode (o: f32* [8] out, n: i32) {
  for item in 0 .. n parallel @work {
    store o[item] = 2.0:f32
  }
  return 0
}
`
	plan := func(direct string, launches ...string) *ir.Plan {
		p := &ir.Plan{Role: ir.RoleDecode, Entry: "t_decode", Public: true,
			Params: []*ir.Param{{Name: "o", Buffer: true, Elem: ir.F32, Output: true}, {Name: "n", Elem: ir.I32}},
			Direct: []ir.Launch{{Kernel: direct, Items: ir.R("n", ir.I32)}}}
		if launches != nil {
			s := &ir.Split{Splits: ir.Int(2), Scratch: []ir.Scratch{{Name: "part", T: ir.F32, Size: ir.Int(8)}}}
			for _, l := range launches {
				s.Launches = append(s.Launches, ir.Launch{Kernel: l, Items: ir.R("n", ir.I32)})
			}
			p.Split = s
		}
		return p
	}
	for _, c := range []struct {
		name string
		plan *ir.Plan
		err  string
	}{
		{"chunks then merge", plan("t_direct", "t_chunks", "t_merge"), ""},
		{"merge before the last launch", plan("t_direct", "t_chunks", "t_merge", "t_chunks"), "writes buffer o before the last launch"},
		{"write before the parallel loop", plan("t_early"), "writes buffer o outside its last parallel loop"},
	} {
		m, err := ir.Parse(kernels)
		if err != nil {
			t.Fatal(err)
		}
		m.Plans = []*ir.Plan{c.plan}
		out, err := Assemble(m)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := ir.Verify(out); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		text := out.Kernel("t_decode").String()
		for _, want := range []string{"call split_status1 = t_merge(", "if (split_status == 0) {", "return split_status", "return work_status"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the entry lacks %q:\n%s", c.name, want, text)
			}
		}
	}
}
