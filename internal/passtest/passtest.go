// Package passtest runs {before, after} pass tests: each testdata file
// names the passes to run on its first line (`passes: a, b`), then holds a
// module in the kernel IR's text form after `-- before --` and the module
// those passes must print after `-- after --`. -update rewrites the after
// part, which a reviewer then reads. Every result is verified.
//
// A case may also say `run: KERNEL name=value ...`: the kernel then runs in
// the interpreter before and after the passes, on the same random inputs
// (buffer sizes from their constant shapes, the scalars as given), and
// every output buffer must agree to a relative 1e-3 (the schedules may
// reorder sums; NaN must stay NaN).
//
// passtest imports ir and passes; only tests import it.
package passtest

import (
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

// Run runs every file matching glob with the passes of table.
func Run(t *testing.T, glob string, table []passes.Pass, update bool) {
	t.Helper()
	files, _ := filepath.Glob(glob)
	if len(files) == 0 {
		t.Fatalf("no test files match %s", glob)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text := string(data)
			head, rest, ok := strings.Cut(text, "-- before --\n")
			before, after, ok2 := strings.Cut(rest, "-- after --\n")
			if !ok || !ok2 {
				t.Fatal("want a `-- before --` and an `-- after --` section")
			}
			var names, runLine []string
			for _, line := range strings.Split(head, "\n") {
				if n, ok := strings.CutPrefix(line, "passes:"); ok {
					for _, s := range strings.Split(n, ",") {
						names = append(names, strings.TrimSpace(s))
					}
				}
				if r, ok := strings.CutPrefix(line, "run:"); ok {
					runLine = strings.Fields(r)
				}
			}
			if len(names) == 0 {
				t.Fatal("no `passes:` line")
			}
			m, err := ir.Parse(before)
			if err != nil {
				t.Fatalf("before: %v", err)
			}
			ir.MustVerify("before", m)
			orig := m
			for _, n := range names {
				p := passes.Find(table, n)
				if p == nil {
					t.Fatalf("unknown pass %q", n)
				}
				if m, err = p.Run(m); err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				ir.MustVerify(n, m)
			}
			if len(runLine) > 0 {
				same(t, orig, m, runLine)
			}
			got := m.String()
			if update {
				if err := os.WriteFile(f, []byte(head+"-- before --\n"+before+"-- after --\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != after {
				t.Errorf("after %v:\n%s\nwant:\n%s", names, got, after)
			}
		})
	}
}

// same runs kernel run[0] of before and after on the same random inputs
// and compares their outputs.
func same(t *testing.T, before, after *ir.Module, run []string) {
	t.Helper()
	k := before.Kernel(run[0])
	if k == nil {
		t.Fatalf("run: no kernel %s", run[0])
	}
	scalars := map[string]int64{}
	for _, kv := range run[1:] {
		n, v, ok := strings.Cut(kv, "=")
		x, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			t.Fatalf("run: bad argument %q", kv)
		}
		scalars[n] = x
	}
	rng := rand.New(rand.NewSource(7))
	mk := func() map[string]any {
		args := map[string]any{}
		for _, p := range k.Params {
			if !p.Buffer {
				x, ok := scalars[p.Name]
				if !ok {
					t.Fatalf("run: no value for %s", p.Name)
				}
				args[p.Name] = int32(x)
				continue
			}
			n := 1
			for _, d := range p.Shape {
				x, err := strconv.Atoi(d)
				if err != nil {
					t.Fatalf("run: buffer %s has a symbolic shape %v", p.Name, p.Shape)
				}
				n *= x
			}
			switch p.Elem {
			case ir.F32:
				b := make([]float32, n)
				for i := range b {
					b[i] = rng.Float32() - 0.5
				}
				args[p.Name] = b
			case ir.F16, ir.BF16, ir.I16:
				b := make([]uint16, n)
				for i := range b {
					x := rng.Float64() - 0.5
					v, _ := ir.EvalExpr(&ir.Convert{To: p.Elem, X: ir.Float(x)}, nil)
					if p.Elem == ir.I16 {
						v = uint16(rng.Intn(1 << 16))
					}
					b[i] = v.(uint16)
				}
				args[p.Name] = b
			case ir.E4M3, ir.E5M2, ir.I8: // any byte is a code
				b := make([]uint8, n)
				for i := range b {
					b[i] = uint8(rng.Intn(256))
				}
				args[p.Name] = b
			case ir.I32:
				b := make([]int32, n)
				args[p.Name] = b
			default:
				t.Fatalf("run: buffer %s of %s", p.Name, p.Elem)
			}
		}
		return args
	}
	a := mk()
	rng = rand.New(rand.NewSource(7))
	b := mk()
	for _, x := range []struct {
		m    *ir.Module
		args map[string]any
		when string
	}{{before, a, "before"}, {after, b, "after"}} {
		if st, err := ir.Run(x.m, run[0], x.args); err != nil || st != 0 {
			t.Fatalf("run %s: status %d, %v", x.when, st, err)
		}
	}
	for _, p := range k.Params {
		if !p.Output {
			continue
		}
		x, ok1 := a[p.Name].([]float32)
		y, ok2 := b[p.Name].([]float32)
		if !ok1 || !ok2 {
			continue
		}
		for i := range x {
			xi, yi := float64(x[i]), float64(y[i])
			if math.IsNaN(xi) != math.IsNaN(yi) || !math.IsNaN(xi) && math.Abs(xi-yi) > 1e-3*math.Max(1, math.Abs(xi)) {
				t.Errorf("run: %s[%d] = %v before the passes, %v after", p.Name, i, xi, yi)
				return
			}
		}
	}
}
