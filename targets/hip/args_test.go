package hip

import (
	"maps"
	"testing"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/ir"
)

const argsSrc = `module a prefix a

kernel a_attn role decode (q: f32* [n], kv: f32* [n], idx: i32* [n], o: f32* [n] out, n: i32, np: i32) {
  for item in 0 .. n parallel @work {
    var acc = q[item]
    for kt in 0 .. n serial @kv_tile [kv_pos = kt .. kt] {
      if (idx[kt] < np) {
        acc = (acc + kv[idx[kt]])
      }
    }
    store o[item] = acc
  }
  return 0
}

kernel a_light role decode (x: f32* [n] out, n: i32) {
  for item in 0 .. n parallel @work {
    store x[item] = 0.0:f32
  }
  return 0
}
`

// An attention kernel reads where they are used the buffers its tile loop
// does not mention — the input q at each use, the output o once per phase —
// and every scalar (n, np — np inside the loop too) once per phase; it
// holds the buffers the loop reads (kv, idx). A kernel without a tile loop
// is left alone.
func TestArgsAtUse(t *testing.T) {
	m, err := ir.Parse(argsSrc)
	if err != nil {
		t.Fatal(err)
	}
	got := ArgsAtUse(m.Kernel("a_attn"))
	want := map[string]cstyle.ArgRead{"q": cstyle.ArgEachUse, "o": cstyle.ArgPerPhase, "n": cstyle.ArgPerPhase, "np": cstyle.ArgPerPhase}
	if !maps.Equal(got, want) {
		t.Errorf("attention kernel: %v, want %v", got, want)
	}
	if got := ArgsAtUse(m.Kernel("a_light")); len(got) != 0 {
		t.Errorf("kernel without a tile loop: %v, want none", got)
	}
}
