package cpu

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestAssembleKeepsOutputsUntouched: Assemble refuses a plan whose work
// kernels could write an entry buffer before a later allocation fails — a
// launch before the last one writing it, or a write outside the kernel's
// last parallel loop, a NULL bound where a kernel cannot take it — and
// accepts the split-KV shape (chunks into scratch, then the merge writing
// o), also with one kernel serving the direct and the split launch, each
// passing NULL for the buffer the other writes, whose entry returns the
// launches' status.
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

kernel t_both role decode (o: f32* [8] out null, part: f32* [8] out null, n: i32) {
  for item in 0 .. n parallel @work {
    if nonnull(part) {
      store part[item] = 1.0:f32
    }
    if nonnull(o) {
      store o[item] = 2.0:f32
    }
  }
  return 0
}

kernel t_unguarded role decode (o: f32* [8] out null, part: f32* [8] out null, n: i32) {
  for item in 0 .. n parallel @work {
    if nonnull(part) {
      store part[item] = 1.0:f32
    }
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
	// one is the plan of a kernel serving both launches: the direct one
	// binds part to NULL, the split one o (lower.Tiling.DecodeOneKernel).
	one := func(kernel string, binds ...ir.Bind) *ir.Plan {
		p := plan(kernel, kernel, "t_merge")
		p.Direct[0].Bind = binds
		p.Split.Launches[0].Bind = []ir.Bind{{Param: "o"}}
		return p
	}
	for _, c := range []struct {
		name string
		plan *ir.Plan
		err  string
	}{
		{"chunks then merge", plan("t_direct", "t_chunks", "t_merge"), ""},
		{"one kernel, NULL bound per launch", one("t_both", ir.Bind{Param: "part"}), ""},
		{"one kernel writing o unguarded", one("t_unguarded", ir.Bind{Param: "part"}), "writes buffer o before the last launch"},
		{"a value bound to a buffer", one("t_both", ir.Bind{Param: "part", Value: ir.Int(1)}), "launch binds parameter part to what it cannot take"},
		{"NULL bound to a scalar", one("t_both", ir.Bind{Param: "part"}, ir.Bind{Param: "n"}), "launch binds parameter n to what it cannot take"},
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
		wants := []string{"call split_status1 = t_merge(", "if (split_status == 0) {", "return split_status", "return work_status"}
		if c.plan.Direct[0].Kernel == "t_both" {
			// NULL is the constant 0 in a buffer's place (ir.NullArg).
			wants = append(wants, "call work_status0 = t_both(o, 0, n)", "call split_status0 = t_both(0, part, n)")
		}
		for _, want := range wants {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the entry lacks %q:\n%s", c.name, want, text)
			}
		}
	}
}
