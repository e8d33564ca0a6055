package passes

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/attnc/attnc/ir"
)

// Pass is one entry of the pass table.
type Pass struct {
	Name     string
	Desc     string
	Required bool // the backends cannot print IR that skipped it
	Run      func(*ir.Module) (*ir.Module, error)
}

// Table is the ordered pass table for CPU code. Constraints lists why the
// order is what it is; a test checks each.
var Table = []Pass{
	{Name: "inline-defs", Required: true, Run: InlineDefs,
		Desc: "replace @mask/@score/@plan_splits calls by the module's Def bodies"},
	{Name: "simplify", Run: Simplify,
		Desc: "fold constants and boolean identities, drop dead ifs and empty loops"},
	{Name: "classify-tiles", Run: ClassifyTiles,
		Desc: "interval analysis of the mask over each KV tile: skip hidden tiles, drop per-element masks on fully visible ones"},
	{Name: "expand-calls", Required: true, Run: ExpandCalls,
		Desc: "expand softcap and alibi_slope into arithmetic"},
	{Name: "legalize-dtype", Required: true, Run: LegalizeDType,
		Desc: "carry f16/bf16 as i16 bits with explicit round-to-nearest-even conversions"},
	{Name: "late-simplify", Run: Simplify,
		Desc: "fold what the expansions exposed"},
	{Name: "heap-scratch", Run: HeapScratch,
		Desc: "move work items' local arrays of more than 1 KiB off the stack into per-worker heap scratch"},
}

// Constraint is an ordering rule of the table: Before must run before After.
type Constraint struct {
	Before, After string
	Why           string
}

// Constraints are checked by TestPassOrder.
var Constraints = []Constraint{
	{"inline-defs", "classify-tiles", "classify-tiles analyses the mask expression, which is a @mask call until inlined"},
	{"simplify", "classify-tiles", "a constant-true mask (mask none) must be folded away so no tile check is emitted"},
	{"classify-tiles", "expand-calls", "the interval analysis understands the mask before calls are expanded"},
	{"inline-defs", "expand-calls", "softcap and alibi_slope calls come from inlined @score bodies"},
	{"expand-calls", "legalize-dtype", "expansions produce f32 arithmetic that legalize-dtype must not see half of"},
}

// Options controls a pipeline run.
type Options struct {
	VerifyEach bool      // run ir.Verify after every pass (panics with BUG: <pass>:)
	PrintAfter string    // "all" or a pass name: print the module after it to Out
	Out        io.Writer // where PrintAfter goes (default os.Stderr)
	DumpDir    string    // when set, write NN-<pass>.ir files there
	Skip       map[string]bool
}

// Run lowers m through the table.
func Run(m *ir.Module, opt Options) (*ir.Module, error) {
	return RunTable(Table, m, opt)
}

// RunTable runs the given pass table over m.
func RunTable(table []Pass, m *ir.Module, opt Options) (*ir.Module, error) {
	out := opt.Out
	if out == nil {
		out = os.Stderr
	}
	if opt.PrintAfter != "" && opt.PrintAfter != "all" && Find(table, opt.PrintAfter) == nil {
		return nil, fmt.Errorf("--print-after: no pass named %q (see `attnc passes`)", opt.PrintAfter)
	}
	if opt.DumpDir != "" {
		if err := os.MkdirAll(opt.DumpDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(opt.DumpDir, m.Name+".00-lower.ir"), []byte(m.String()), 0o644); err != nil {
			return nil, err
		}
	}
	if opt.VerifyEach {
		ir.MustVerify("lower", m)
	}
	for i, p := range table {
		if opt.Skip[p.Name] && !p.Required {
			continue
		}
		var err error
		m, err = p.Run(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		if opt.VerifyEach {
			ir.MustVerify(p.Name, m)
		}
		if opt.PrintAfter == "all" || opt.PrintAfter == p.Name {
			fmt.Fprintf(out, "// --- after %s ---\n%s", p.Name, m.String())
		}
		if opt.DumpDir != "" {
			name := fmt.Sprintf("%s.%02d-%s.ir", m.Name, i+1, p.Name)
			if err := os.WriteFile(filepath.Join(opt.DumpDir, name), []byte(m.String()), 0o644); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
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
