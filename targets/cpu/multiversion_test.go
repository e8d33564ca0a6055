package cpu

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/attnc/attnc/ir"
)

// TestFallsTo: a kernel without a clone at the level chosen runs the best
// level below it that has no Vendor — x86-64-v4, not x86-64-v4-bf16, at
// x86-64-amx (AMX CPUs are Intel's, where vdpbf16ps does not pay) — in
// the entries' dispatch (run in the interpreter at every level), in the
// calls of a clone (renameCalls), in a restricted build (keep), and for a
// level ATTNC_CPU_LEVEL names that the module lacks (absentLevels);
// x86-64-v4-bf16 itself runs where it is chosen.
func TestFallsTo(t *testing.T) {
	all := x86Levels
	amx, bf16 := len(all)-1, len(all)-2
	if !all[amx].AMX || all[bf16].Vendor == "" || all[bf16-1].Vendor != "" {
		t.Fatalf("the table's last levels are not x86-64-v4, x86-64-v4-bf16 (with a Vendor) and x86-64-amx")
	}
	// w has no x86-64-amx clone, a has every one; each clone stores its
	// level's index.
	at := map[string][]int{"w": {0, 1, 2, bf16}, "a": {0, 1, 2, bf16, amx}}
	index := map[int]int{}
	for i := range all {
		index[i] = i
	}
	out := &ir.Param{Name: "out", Elem: ir.I32, Buffer: true, Output: true}
	m := &ir.Module{Name: "t", Prefix: "t"}
	for _, name := range slices.Sorted(maps.Keys(at)) {
		for _, i := range at[name] {
			m.Kernels = append(m.Kernels, &ir.Kernel{Name: name + all[i].Suffix, Level: all[i].Name, Params: []*ir.Param{out},
				Body: &ir.Block{Stmts: []ir.Stmt{&ir.Store{Buf: "out", Index: ir.Int(0), Value: ir.Int(int64(i))}, &ir.Return{Value: ir.Int(0)}}}})
		}
	}
	calls := &ir.Block{Stmts: []ir.Stmt{&ir.CallStmt{Fn: "w", Args: []ir.Expr{ir.R("ow", ir.I32)}}, &ir.CallStmt{Fn: "a", Args: []ir.Expr{ir.R("oa", ir.I32)}}}}
	entry := &ir.Kernel{Name: "t_entry", Params: []*ir.Param{{Name: "ow", Elem: ir.I32, Buffer: true, Output: true}, {Name: "oa", Elem: ir.I32, Buffer: true, Output: true}, {Name: "lv", Elem: ir.I32}},
		Body: &ir.Block{Stmts: append([]ir.Stmt{&ir.Var{Name: levelVar, Init: ir.R("lv", ir.I32)}}, dispatch(calls, at, all, index).Stmts...)}}
	m.Kernels = append(m.Kernels, entry)
	for lv := range all {
		args := map[string]any{"ow": []int32{-1}, "oa": []int32{-1}, "lv": int32(lv)}
		if st, err := ir.Run(m, "t_entry", args); err != nil || st != 0 {
			t.Fatalf("level %s: status %d, %v", all[lv].Name, st, err)
		}
		wantW, wantA := min(lv, bf16), lv
		if lv == amx {
			wantW = bf16 - 1
		}
		if w, a := args["ow"].([]int32)[0], args["oa"].([]int32)[0]; w != int32(wantW) || a != int32(wantA) {
			t.Errorf("at %s: w ran %s, a %s; want %s, %s", all[lv].Name, all[w].Name, all[a].Name, all[wantW].Name, all[wantA].Name)
		}
	}
	// A clone at x86-64-amx calls w's x86-64-v4 clone.
	renamed := renameCalls(&ir.Block{Stmts: []ir.Stmt{&ir.CallStmt{Fn: "w"}}}, at, all, amx)
	if fn := renamed.Stmts[0].(*ir.CallStmt).Fn; fn != "w"+all[bf16-1].Suffix {
		t.Errorf("an x86-64-amx clone calls %s", fn)
	}
	// Restricted builds.
	for _, c := range []struct {
		built []int
		want  []int
	}{{[]int{amx}, []int{bf16 - 1}}, {[]int{bf16}, []int{bf16}}, {[]int{0, amx}, []int{0, bf16 - 1}}} {
		mc := &Machine{Arch: Arches[0], built: c.built}
		if got := mc.keep(at["w"]); !slices.Equal(got, c.want) {
			t.Errorf("w built at %v: cloned at %v, want %v", c.built, got, c.want)
		}
	}
	// ATTNC_CPU_LEVEL=x86-64-amx in a module without it runs x86-64-v4;
	// x86-64-v4-bf16 only where the module has nothing else below from
	// the floor up (a build restricted to x86-64-v4-bf16, whose prefill
	// has no x86-64-v4 clone).
	for _, c := range []struct {
		module []Level
		floor  int
		want   []absentLevel
	}{
		{all[:amx], 0, []absentLevel{{all[amx].Name, bf16 - 1}}},
		{all[bf16-1 : amx], 1, []absentLevel{{all[0].Name, -1}, {all[1].Name, -1}, {all[amx].Name, 1}}},
		{all[bf16-1 : amx], 0, []absentLevel{{all[0].Name, -1}, {all[1].Name, -1}, {all[amx].Name, 0}}},
		{all[bf16 : bf16+1], 0, []absentLevel{{all[0].Name, -1}, {all[1].Name, -1}, {all[2].Name, -1}, {all[amx].Name, 0}}},
		{[]Level{all[0], all[bf16]}, 0, []absentLevel{{all[1].Name, 0}, {all[2].Name, 0}, {all[amx].Name, 0}}},
	} {
		if got := fmt.Sprint(absentLevels(all, c.module, c.floor)); got != fmt.Sprint(c.want) {
			t.Errorf("absent levels of a module of %d levels from %s: %s, want %v", len(c.module), c.module[0].Name, got, c.want)
		}
	}
	// Detection's stand-in for x86-64-v4-bf16 on another vendor's CPU:
	// x86-64-v4 where the module has it right below, none otherwise.
	for _, c := range []struct {
		module []Level
		want   map[int]int
	}{
		{all, map[int]int{bf16: bf16 - 1}},
		{all[bf16-1 : amx], map[int]int{1: 0}},
		{all[bf16 : bf16+1], map[int]int{}},
		{[]Level{all[0], all[bf16]}, map[int]int{}},
	} {
		if got := vendorFallbacks(all, c.module); !maps.Equal(got, c.want) {
			t.Errorf("vendor fallbacks of %d levels from %s: %v, want %v", len(c.module), c.module[0].Name, got, c.want)
		}
	}
}
