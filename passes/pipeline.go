package passes

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/attnc/attnc/ir"
)

// Pass is one entry of the pass table.
type Pass struct {
	Name     string
	Desc     string
	Required bool // the backends cannot print IR that skipped it
	Run      func(*ir.Module) (*ir.Module, error)
	// Inserted marks a pass placed by Insert (a user pass): its failures
	// (an error, a panic, a missing module or kernel body, invalid IR under
	// VerifyEach) are reported as that pass's errors. The failures of the
	// other passes are reported as internal errors of attnc.
	Inserted bool
}

// The target-neutral passes. Each target's table (see package targets)
// lists them with its own schedule passes.
var (
	InlineDefsPass = Pass{Name: "inline-defs", Required: true, Run: InlineDefs,
		Desc: "replace @mask/@score/@plan_splits calls by the module's Def bodies"}
	SimplifyPass = Pass{Name: "simplify", Run: Simplify,
		Desc: "fold constants and boolean identities, drop dead ifs and empty loops"}
	ClassifyTilesPass = Pass{Name: "classify-tiles", Run: ClassifyTiles,
		Desc: "interval analysis of the mask over each KV tile: skip hidden tiles, drop per-element masks on fully visible ones"}
	ExpandCallsPass = Pass{Name: "expand-calls", Required: true, Run: ExpandCalls,
		Desc: "expand softcap and alibi_slope into arithmetic"}
	LegalizeDTypePass = Pass{Name: "legalize-dtype", Required: true, Run: LegalizeDType,
		Desc: "carry f16/bf16 as their carrier bits with the dtype table's exact conversions"}
	LateSimplifyPass = Pass{Name: "late-simplify", Run: Simplify,
		Desc: "fold what the expansions and schedules exposed"}
	HeapScratchPass = Pass{Name: "heap-scratch", Run: HeapScratch,
		Desc: "move work items' local arrays of more than 1 KiB off the stack into per-worker heap scratch"}
)

// Neutral lists the target-neutral passes in the order every table runs
// them (targets put their schedule passes in between).
var Neutral = []Pass{InlineDefsPass, SimplifyPass, ClassifyTilesPass, ExpandCallsPass, LegalizeDTypePass, LateSimplifyPass}

// Constraint is an ordering rule of a table: Before must run before After.
type Constraint struct {
	Before, After string
	Why           string
}

// NeutralConstraints order the neutral passes; every target's table
// satisfies them (a test checks each table).
var NeutralConstraints = []Constraint{
	{"inline-defs", "classify-tiles", "classify-tiles analyses the mask expression, which is a @mask call until inlined"},
	{"simplify", "classify-tiles", "a constant-true mask (mask none) must be folded away so no tile check is emitted"},
	{"classify-tiles", "expand-calls", "the interval analysis understands the mask before calls are expanded"},
	{"inline-defs", "expand-calls", "softcap and alibi_slope calls come from inlined @score bodies"},
	{"expand-calls", "legalize-dtype", "expansions produce f32 arithmetic that legalize-dtype must not see half of"},
}

// CheckOrder returns the first constraint the table breaks, or a pass
// listed twice, as an error naming the reason.
func CheckOrder(table []Pass, cs []Constraint) error {
	idx := map[string]int{}
	for i, p := range table {
		if _, dup := idx[p.Name]; dup {
			return fmt.Errorf("pass %s listed twice", p.Name)
		}
		idx[p.Name] = i
	}
	for _, c := range cs {
		b, ok1 := idx[c.Before]
		a, ok2 := idx[c.After]
		if !ok1 || !ok2 {
			return fmt.Errorf("constraint %s before %s names a pass the table does not have", c.Before, c.After)
		}
		if b >= a {
			return fmt.Errorf("%s must run before %s: %s", c.Before, c.After, c.Why)
		}
	}
	return nil
}

// CheckPresent is CheckOrder for a table built from a target's (with
// passes inserted, or a prefix of it): the constraints whose two passes
// are both in table must hold; one naming a pass the table lacks does not
// apply to it. A pass listed twice is an error too.
func CheckPresent(table []Pass, cs []Constraint) error {
	idx := map[string]int{}
	for i, p := range table {
		if _, dup := idx[p.Name]; dup {
			return fmt.Errorf("pass %s listed twice", p.Name)
		}
		idx[p.Name] = i
	}
	for _, c := range cs {
		b, ok1 := idx[c.Before]
		a, ok2 := idx[c.After]
		if ok1 && ok2 && b >= a {
			return fmt.Errorf("%s must run before %s: %s", c.Before, c.After, c.Why)
		}
	}
	return nil
}

// Options controls a pipeline run.
type Options struct {
	VerifyEach bool      // run ir.Verify after every pass (an error names the pass)
	PrintAfter string    // "all" or a pass name: print the module after it to Out
	Out        io.Writer // where PrintAfter goes (default os.Stderr)
	DumpDir    string    // when set, write <module>[.<target>].NN-<pass>.ir files there
	Skip       map[string]bool
	// Target names the table's target in printed headers and dump file
	// names (several targets schedule modules of the same name).
	Target string
}

// RunTable runs the given pass table over m. A PrintAfter name the table
// does not have prints nothing (the caller checks names against every
// table it runs).
func RunTable(table []Pass, m *ir.Module, opt Options) (*ir.Module, error) {
	out := opt.Out
	if out == nil {
		out = os.Stderr
	}
	base, label := m.Name, ""
	if opt.Target != "" {
		base += "." + opt.Target
		label = " (" + opt.Target + ")"
	}
	if opt.DumpDir != "" {
		if err := os.MkdirAll(opt.DumpDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(opt.DumpDir, base+".00-lower.ir"), []byte(m.String()), 0o644); err != nil {
			return nil, err
		}
	}
	if opt.VerifyEach {
		if err := ir.Verify(m); err != nil {
			return nil, fmt.Errorf("internal error (a bug in attnc): the module before the passes is invalid: %w", err)
		}
	}
	for i, p := range table {
		if opt.Skip[p.Name] && !p.Required {
			continue
		}
		var err error
		if m, err = runPass(p, m, opt.VerifyEach); err != nil {
			return nil, err
		}
		if opt.PrintAfter == "all" || opt.PrintAfter == p.Name {
			fmt.Fprintf(out, "// --- after %s%s ---\n%s", p.Name, label, m.String())
		}
		if opt.DumpDir != "" {
			name := fmt.Sprintf("%s.%02d-%s.ir", base, i+1, p.Name)
			if err := os.WriteFile(filepath.Join(opt.DumpDir, name), []byte(m.String()), 0o644); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// runPass runs p on m and checks what it returned: a module whose kernels
// all have bodies, whose names are identifiers and, with verify, that
// passes ir.Verify. A panic in p is recovered into an error. Every error
// names p; one of a built-in pass says that it is a bug in attnc.
func runPass(p Pass, m *ir.Module, verify bool) (out *ir.Module, err error) {
	fail := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if p.Inserted {
			return fmt.Errorf("pass %s: %s", p.Name, msg)
		}
		return fmt.Errorf("internal error (a bug in attnc) in pass %s: %s", p.Name, msg)
	}
	defer func() {
		if r := recover(); r != nil {
			out = nil
			if p.Inserted {
				err = fail("panic: %v", r)
			} else {
				err = fail("panic: %v\n%s", r, debug.Stack())
			}
		}
	}()
	out, err = p.Run(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	if err := CheckModule(out); err != nil {
		return nil, fail("%v", err)
	}
	if verify {
		if err := ir.Verify(out); err != nil {
			return nil, fail("invalid kernel IR: %v", err)
		}
	}
	return out, nil
}

// CheckModule checks the shape every pass must return: a module, no nil
// kernel, every kernel with a body, and identifiers for every name that
// reaches generated text at module level (ir.CheckNames).
func CheckModule(m *ir.Module) error {
	if m == nil {
		return errors.New("returned no module (nil)")
	}
	for i, k := range m.Kernels {
		switch {
		case k == nil:
			return fmt.Errorf("kernel %d of the module is nil", i)
		case k.Body == nil:
			return fmt.Errorf("kernel %s has no body", k.Name)
		}
	}
	return ir.CheckNames(m)
}

// Find returns the pass named name, or nil.
func Find(table []Pass, name string) *Pass {
	for i := range table {
		if table[i].Name == name {
			return &table[i]
		}
	}
	return nil
}

// mapKernels applies f to every kernel body.
func mapKernels(m *ir.Module, f func(*ir.Kernel) (*ir.Block, error)) (*ir.Module, error) {
	out := *m
	out.Kernels = nil
	for _, k := range m.Kernels {
		body, err := f(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Name, err)
		}
		nk := *k
		nk.Body = body
		out.Kernels = append(out.Kernels, &nk)
	}
	return &out, nil
}
