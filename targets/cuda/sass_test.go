package cuda

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/codegen/cuda/sass"
)

// The targets apply to the kernels issue 11 names, and each one can fail.
func TestSASSTargets(t *testing.T) {
	good := func(role, dtype string) SASSRow {
		r := SASSRow{Role: role, DType: dtype, Kernel: sass.Kernel{Name: "k", Arch: "sm_90", Registers: 64,
			Opcodes: map[string]int{"LDGSTS.E.BYPASS.128": 4, "LDSM.16.M88.4": 8, "HMMA.16816.F32": 16}},
			MaxRegisters: 128, MinBlocks: 2, Occupancy: sass.Occupancy{BlocksPerSM: 4}}
		return r
	}
	for _, r := range []SASSRow{good("prefill", "f16"), good("prefill", "bf16"), good("decode", "f16"),
		good("merge_state", "f32")} {
		if u := CheckSASS([]SASSRow{r}); len(u) != 0 {
			t.Errorf("%s %s: %v", r.Role, r.DType, u)
		}
	}
	cases := []struct {
		name   string
		mutate func(*SASSRow)
		want   string
	}{
		{"spill", func(r *SASSRow) { r.SpillStores = 8 }, "zero spills"},
		{"stack", func(r *SASSRow) { r.StackFrame = 64 }, "zero stack frame"},
		{"no cp.async", func(r *SASSRow) { delete(r.Opcodes, "LDGSTS.E.BYPASS.128") }, "has LDGSTS"},
		{"no ldmatrix", func(r *SASSRow) { delete(r.Opcodes, "LDSM.16.M88.4") }, "has LDSM"},
		{"no mma", func(r *SASSRow) { delete(r.Opcodes, "HMMA.16816.F32") }, "has HMMA"},
		{"local loads", func(r *SASSRow) { r.Opcodes["LDL.64"] = 1 }, "no LDL/STL"},
		{"local stores", func(r *SASSRow) { r.Opcodes["STL.U8"] = 1 }, "no LDL/STL"},
		{"over the register bound", func(r *SASSRow) { r.MaxRegisters = 56 }, "launch bound"},
		{"under the stated occupancy", func(r *SASSRow) { r.MinBlocks = 9; r.Occupancy.BlocksPerSM = 8 }, "occupancy at least"},
	}
	for _, c := range cases {
		r := good("prefill", "bf16")
		c.mutate(&r)
		u := CheckSASS([]SASSRow{r})
		if len(u) != 1 || !strings.Contains(u[0], c.want) {
			t.Errorf("%s: CheckSASS = %v, want one failure %q", c.name, u, c.want)
		}
	}
	// f32 prefill needs no tensor-core path; decode needs wide loads.
	r := good("prefill", "f32")
	r.Opcodes = map[string]int{"FFMA": 1}
	if u := CheckSASS([]SASSRow{r}); len(u) != 0 {
		t.Errorf("f32 prefill: %v", u)
	}
	d := good("decode", "f16")
	d.Opcodes = map[string]int{"LDG.E": 8}
	if u := CheckSASS([]SASSRow{d}); len(u) != 1 || !strings.Contains(u[0], "LDGSTS or LDG.128") {
		t.Errorf("decode with 32-bit loads: %v", u)
	}
	d.Opcodes = map[string]int{"LDG.E.128.CONSTANT": 8}
	if u := CheckSASS([]SASSRow{d}); len(u) != 0 {
		t.Errorf("decode with 128-bit loads: %v", u)
	}
}
