package attnc_test

import (
	"strings"
	"testing"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// mapModule returns a pass named name that applies f to a copy of the
// module (kernels copied too, so f may change them).
func mapModule(name string, f func(m *ir.Module) *ir.Module) passes.Pass {
	return passes.Pass{Name: name, Run: func(m *ir.Module) (*ir.Module, error) {
		out := *m
		out.Kernels = nil
		for _, k := range m.Kernels {
			nk := *k
			out.Kernels = append(out.Kernels, &nk)
		}
		return f(&out), nil
	}}
}

// entryKernels are the kernels the module's plans name: CPU entry kernels
// and every launched work kernel.
func entryKernels(m *ir.Module) map[string]bool {
	names := map[string]bool{}
	for _, p := range m.Plans {
		names[p.Entry] = true
		for _, l := range ir.PlanLaunches(p) {
			names[l.Kernel] = true
		}
	}
	return names
}

// compileNoPanic runs Compile, turning a panic into a test failure.
func compileNoPanic(t *testing.T, opt attnc.Options) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("Compile panicked: %v", r)
			err = nil
		}
	}()
	_, err = attnc.Compile("win.attn", []byte(causalSpec), opt)
	return err
}

// TestUserPassFailures checks that a user pass that fails in any way makes
// Compile return an error (naming the pass where a pass is to blame) on
// both targets, never a panic and never files that disagree with their
// header or manifest.
func TestUserPassFailures(t *testing.T) {
	undefined := func(m *ir.Module) *ir.Module {
		k := *m.Kernels[0]
		k.Body = &ir.Block{Stmts: append([]ir.Stmt{&ir.Let{Name: "x", Value: ir.Bin(ir.Add, ir.R("nowhere", ir.I32), ir.Int(1))}}, k.Body.Stmts...)}
		m.Kernels[0] = &k
		return m
	}
	cases := []struct {
		name   string
		pass   passes.Pass
		verify bool
		want   []string // every one must be in the error
	}{
		{"nil module", passes.Pass{Name: "returns-nil", Run: func(*ir.Module) (*ir.Module, error) { return nil, nil }},
			false, []string{"returns-nil", "no module"}},
		{"nil kernel", mapModule("nil-kernel", func(m *ir.Module) *ir.Module { m.Kernels = append(m.Kernels, nil); return m }),
			false, []string{"nil-kernel", "is nil"}},
		{"nil body", mapModule("nil-body", func(m *ir.Module) *ir.Module { m.Kernels[0].Body = nil; return m }),
			false, []string{"nil-body", "has no body"}},
		{"panic", passes.Pass{Name: "panics", Run: func(*ir.Module) (*ir.Module, error) { panic("boom") }},
			false, []string{"panics", "panic: boom"}},
		{"nil map panic", passes.Pass{Name: "nil-map", Run: func(m *ir.Module) (*ir.Module, error) {
			var mm map[string]int
			mm["x"]++
			return m, nil
		}}, false, []string{"nil-map", "panic"}},
		{"entries deleted", mapModule("drop-entries", func(m *ir.Module) *ir.Module {
			drop := entryKernels(m)
			var ks []*ir.Kernel
			for _, k := range m.Kernels {
				if !drop[k.Name] {
					ks = append(ks, k)
				}
			}
			m.Kernels = ks
			return m
		}), false, []string{"removed"}},
		{"plans deleted", mapModule("drop-plans", func(m *ir.Module) *ir.Module { m.Plans = nil; return m }),
			false, []string{"changed the entries"}},
		{"undefined name", mapModule("undefined", undefined), false, []string{"nowhere"}},
		{"undefined name, verify each", mapModule("undefined", undefined), true, []string{"pass undefined", "nowhere"}},
		{"prefix with */", mapModule("prefix", func(m *ir.Module) *ir.Module { m.Prefix = "x */ int evil; /*"; return m }),
			false, []string{"pass prefix", "not an identifier"}},
		{"prefix with newline", mapModule("prefix", func(m *ir.Module) *ir.Module { m.Prefix = "x\n#define y"; return m }),
			false, []string{"pass prefix", "not an identifier"}},
		{"kernel name", mapModule("rename", func(m *ir.Module) *ir.Module { m.Kernels[0].Name = "k(void); int x"; return m }),
			false, []string{"pass rename", "not an identifier"}},
		{"def name", mapModule("def-name", func(m *ir.Module) *ir.Module {
			m.Defs = append(append([]*ir.Def(nil), m.Defs...), &ir.Def{Name: "a b", Body: ir.Int(1)})
			return m
		}), false, []string{"pass def-name", "not an identifier"}},
		{"status message", mapModule("status-msg", func(m *ir.Module) *ir.Module {
			m.Errors = append(append([]ir.ErrorCode(nil), m.Errors...), ir.ErrorCode{Code: 99, Name: "ODD", Msg: "odd */ int evil; /*"})
			return m
		}), false, []string{"pass status-msg", "*/"}},
		{"let name", mapModule("let-name", func(m *ir.Module) *ir.Module {
			k := m.Kernels[0]
			k.Body = &ir.Block{Stmts: append([]ir.Stmt{&ir.Let{Name: "x;y", Value: ir.Int(1)}}, k.Body.Stmts...)}
			return m
		}), false, []string{"not an identifier"}},
	}
	for _, c := range cases {
		for _, target := range []string{"cpu", "cuda"} {
			err := compileNoPanic(t, attnc.Options{Targets: []string{target}, VerifyEach: c.verify,
				Insert: []attnc.Insertion{{After: "late-simplify", Pass: c.pass}}})
			if err == nil {
				t.Errorf("%s (%s): Compile succeeded", c.name, target)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s (%s): error %q does not say %q", c.name, target, err, w)
				}
			}
			if strings.Contains(err.Error(), "BUG") || strings.Contains(err.Error(), "internal error") {
				t.Errorf("%s (%s): a user pass's failure is reported as attnc's: %v", c.name, target, err)
			}
		}
	}
}

// TestBuiltinPassFailure checks that a failing built-in pass is an
// internal error, not a panic of the caller.
func TestBuiltinPassFailure(t *testing.T) {
	table := []passes.Pass{{Name: "broken", Run: func(*ir.Module) (*ir.Module, error) { panic("index out of range") }}}
	m := &ir.Module{Name: "m", Prefix: "m"}
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("RunTable panicked: %v", r)
			}
		}()
		_, err = passes.RunTable(table, m, passes.Options{})
	}()
	if err == nil || !strings.Contains(err.Error(), "internal error (a bug in attnc) in pass broken") {
		t.Errorf("got %v", err)
	}
	bad := []passes.Pass{{Name: "invalid", Run: func(m *ir.Module) (*ir.Module, error) {
		out := *m
		out.Kernels = []*ir.Kernel{{Name: "k", Body: &ir.Block{Stmts: []ir.Stmt{&ir.Return{Value: ir.R("nope", ir.I32)}}}}}
		return &out, nil
	}}}
	_, err = passes.RunTable(bad, m, passes.Options{VerifyEach: true})
	if err == nil || !strings.Contains(err.Error(), "internal error (a bug in attnc) in pass invalid") || !strings.Contains(err.Error(), "nope") {
		t.Errorf("VerifyEach after a built-in pass: got %v", err)
	}
}
