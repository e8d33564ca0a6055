//go:build cgo

package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/targets"
	"github.com/spf13/cobra"
)

// cgoEnabled says whether this binary can load generated kernels.
const cgoEnabled = true

func runVerify(c *cobra.Command, args []string, vf verifyFlags) error {
	if len(vf.threads) == 0 {
		return fmt.Errorf("attnc verify: --threads is empty")
	}
	if err := checkThreads("attnc verify", vf.threads); err != nil {
		return err
	}
	vs, err := driver.ParseSpecs(args)
	if err != nil {
		return err
	}
	builder, err := suiteBuilder("attnc verify", vf.target, vf.gpu, vf.triple, vf.cpuLevels, vf.cfg)
	if err != nil {
		return err
	}
	// With user passes the kernels are also built without them: the
	// reference computes the spec's attention and knows nothing of the
	// passes, so verify says which cases the passes change.
	var plain buildSuite
	if len(vf.cfg.insert) > 0 {
		if plain, err = suiteBuilder("attnc verify", vf.target, vf.gpu, vf.triple, vf.cpuLevels, &config{}); err != nil {
			return err
		}
	}
	if !threaded(vf.target) {
		vf.threads = []int{1} // one run per case: the launchers take no thread count
	}
	stdout, stderr := c.OutOrStdout(), c.ErrOrStderr()
	tmp, err := os.MkdirTemp("", "attnc-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if plain != nil {
		fmt.Fprintf(stdout, "note: these kernels include the user passes %s; the reference computes the spec without them,\n"+
			"note: so a case checks the passes only where they leave its outputs unchanged (cases they change are marked and listed)\n",
			strings.Join(userPassNames(vf.cfg), ", "))
	}
	passed, failed, skipped := 0, 0, 0
	for _, v := range vs {
		if err := lower.Unsupported(v); err != nil {
			fmt.Fprintf(stdout, "skip %s: %v\n", v.Name, err)
			skipped++
			continue
		}
		dir, err := os.MkdirTemp(tmp, v.Name+"-")
		if err != nil {
			return err
		}
		p, f, err := verifyVariant(stdout, stderr, v, dir, vf, builder, plain)
		passed, failed = passed+p, failed+f
		if err != nil {
			fmt.Fprintf(stdout, "FAIL %s: %v\n", v.Name, err)
			failed++
		}
	}
	summary := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if skipped > 0 {
		summary += fmt.Sprintf(" (%d skipped: not supported yet)", skipped)
	}
	fmt.Fprintln(stdout, summary)
	if failed > 0 {
		return errReported
	}
	return nil
}

// verifyVariant builds v into dir and runs its conformance matrix, printing
// one line per result. A build error or a compiler panic is returned, so that
// the remaining variants still run.
//
// With plain (the builder without the user passes) set, it also runs the
// matrix on those kernels and marks every case whose outputs differ.
func verifyVariant(stdout, stderr io.Writer, v *ir.Variant, dir string, vf verifyFlags, builder, plain buildSuite) (passed, failed int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	var base []conformance.Result
	if plain != nil {
		pdir := filepath.Join(dir, "without-user-passes")
		if err := os.Mkdir(pdir, 0o755); err != nil {
			return 0, 0, err
		}
		ps, err := plain(v, pdir)
		if err != nil {
			return 0, 0, fmt.Errorf("build without the user passes: %w", err)
		}
		base = ps.RunAll(vf.threads, vf.seed)
		if cerr := ps.Close(); cerr != nil {
			fmt.Fprintf(stderr, "attnc verify: %s: closing library: %v\n", v.Name, cerr)
		}
	}
	s, err := builder(v, dir)
	if err != nil {
		return 0, 0, fmt.Errorf("build: %w", err)
	}
	defer func() {
		if cerr := s.Close(); cerr != nil {
			fmt.Fprintf(stderr, "attnc verify: %s: closing library: %v\n", v.Name, cerr)
		}
	}()
	results := s.RunAll(vf.threads, vf.seed)
	var changed []string
	compared := 0
	for i, r := range results {
		line := r.String()
		if plain != nil && r.Digest != 0 && i < len(base) && base[i].Kernel == r.Kernel && base[i].Case == r.Case {
			compared++
			if base[i].Digest != r.Digest {
				line += "  [changed by the user passes]"
				changed = append(changed, fmt.Sprintf("%s %s threads=%d", r.Kernel, r.Case, r.Threads))
			}
		}
		fmt.Fprintln(stdout, line)
		if r.Pass {
			passed++
		} else {
			failed++
		}
	}
	if plain != nil {
		fmt.Fprint(stdout, userPassSummary(v.Name, changed, compared))
	}
	return passed, failed, nil
}

// userPassSummary says, after a variant's cases, which of the compared
// cases the user passes changed (changed lists them) and what that means
// for the comparison with the reference.
func userPassSummary(variant string, changed []string, compared int) string {
	if len(changed) == 0 {
		return fmt.Sprintf("%s: the user passes change no output of these %d cases (identical to the kernels without them), so none of them checks what the passes do\n", variant, compared)
	}
	s := fmt.Sprintf("%s: the user passes change the outputs of %d of %d cases; the reference does not include the passes, so these are compared with attention without them:\n", variant, len(changed), compared)
	for _, c := range changed {
		s += "  " + c + "\n"
	}
	return s
}

// userPassNames lists the names of the configured user passes.
func userPassNames(cfg *config) []string {
	var names []string
	for _, in := range cfg.insert {
		names = append(names, in.Pass.Name)
	}
	return names
}

// buildSuite builds and loads one variant's kernels into dir.
type buildSuite func(v *ir.Variant, dir string) (*conformance.Suite, error)

// suiteBuilder checks the tools a target's harness needs, before any
// work, and returns how to build its suites with the configured passes:
// cpu (LLVM 14 and gcc), cuda on the emulator (g++), cuda on the GPU (nvcc
// and libcudart with a GPU). cpuLevels (nil: every level) restricts the
// cpu target's clones.
func suiteBuilder(cmd, target string, gpu bool, triple string, cpuLevels []string, cfg *config) (buildSuite, error) {
	table, err := cfg.table(target)
	if err != nil {
		return nil, err
	}
	opt := conformance.Options{Passes: table, Triple: triple, CPULevels: cpuLevels}
	t, err := targets.Lookup(target)
	if err != nil {
		return nil, err
	}
	h, ok := t.(targets.Harness)
	if !ok {
		return nil, fmt.Errorf("%s: target %s has no harness: its kernels cannot run on this machine", cmd, target)
	}
	if tr, ok := t.(targets.Triples); ok {
		if err := tr.CheckTriple(triple); err != nil {
			return nil, fmt.Errorf("%s --triple: %w", cmd, err)
		}
	}
	if gpu {
		dh, ok := t.(targets.DeviceHarness)
		if !ok {
			return nil, fmt.Errorf("%s --gpu: target %s does not run on a GPU", cmd, target)
		}
		compiler, err := dh.DeviceTools()
		if err != nil {
			return nil, fmt.Errorf("%s --gpu: %w", cmd, err)
		}
		dev, err := conformance.OpenDevice(target)
		if err != nil {
			return nil, fmt.Errorf("%s --gpu: %w", cmd, err)
		}
		return func(v *ir.Variant, dir string) (*conformance.Suite, error) {
			return conformance.BuildDeviceFor(v, target, dir, compiler, dev, opt)
		}, nil
	}
	if err := h.HarnessTools(targets.Options{Triple: triple, CPULevels: cpuLevels}); err != nil {
		if _, ok := t.(targets.Triples); ok {
			return nil, err
		}
		return nil, fmt.Errorf("%s --target %s: %w", cmd, target, err)
	}
	return func(v *ir.Variant, dir string) (*conformance.Suite, error) {
		return conformance.BuildFor(v, target, dir, opt)
	}, nil
}
