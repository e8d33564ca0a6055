//go:build cgo

package cli

import (
	"fmt"
	"os"

	"github.com/attnc/attnc/bench"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/spf13/cobra"
)

func runBench(c *cobra.Command, args []string, bf benchFlags) error {
	if bf.gpu {
		return runBenchDevice(c, args, bf)
	}
	var plan *bench.Plan
	if len(args) > 0 {
		vs, err := driver.ParseSpecs(args)
		if err != nil {
			return err
		}
		plan = bench.SpecPlan(vs)
	} else {
		// The shape flags follow the spec language's rules, checked
		// before anything is built or measured.
		h := bench.Heads{QOHeads: bf.qoHeads, KVHeads: bf.kvHeads, HeadDim: bf.headDim, PageSize: bf.pageSize}
		if err := bench.CheckHeads(h); err != nil {
			return fmt.Errorf("attnc bench: the built-in shape (--qo-heads %d --kv-heads %d --head-dim %d --page-size %d): %v",
				h.QOHeads, h.KVHeads, h.HeadDim, h.PageSize, err)
		}
		var cases []bench.Builtin
		for _, l := range []struct {
			role  ir.Role
			items []string
		}{{ir.RoleDecode, splitList(bf.decode)}, {ir.RolePrefill, splitList(bf.prefill)}} {
			for _, it := range l.items {
				b, err := bench.ParseStorage(l.role, it)
				if err != nil {
					return fmt.Errorf("attnc bench: --%s: %v", l.role, err)
				}
				cases = append(cases, b)
			}
		}
		if len(cases) == 0 {
			return fmt.Errorf("attnc bench: --decode and --prefill are both empty: nothing to measure")
		}
		plan = bench.BuiltinPlan(h, cases)
	}
	if bf.workDir != "" {
		if err := os.MkdirAll(bf.workDir, 0o755); err != nil {
			return fmt.Errorf("attnc bench: --work-dir: %w", err)
		}
	}
	// The scattered read's blocks are one K (or V) page of the built-in
	// shape in 16 bits, rounded up to whole read steps.
	block := int64(bf.pageSize*bf.kvHeads*bf.headDim*2+255) / 256 * 256
	r, err := bench.RunCPU(plan, bench.CPUOptions{
		Threads: bf.threads, Batch: bf.batch, KVLen: bf.kvLen, QLen: bf.qLen,
		PoolBytes: int64(bf.poolMiB) << 20, StreamBytes: int64(bf.streamMiB) << 20, BlockBytes: block,
		Budget: bench.Budget{Reps: bf.reps, Seconds: bf.seconds}, Seed: bf.seed, Version: version(), Dir: bf.workDir,
		Out: c.OutOrStdout(), CPULevels: bf.cpuLevels,
	})
	if err != nil {
		return fmt.Errorf("attnc bench: %w", err)
	}
	if bf.json != "" {
		if err := r.WriteJSON(bf.json); err != nil {
			return fmt.Errorf("attnc bench: --json: %w", err)
		}
	}
	for _, f := range r.Failed {
		fmt.Fprintf(c.ErrOrStderr(), "attnc bench: %s: %s\n", f.Name, f.Reason)
	}
	if len(r.Failed) > 0 {
		return errReported
	}
	return nil
}

// runBenchDevice times the SPEC files' CUDA launchers on the GPU.
func runBenchDevice(c *cobra.Command, args []string, bf benchFlags) error {
	vs, err := driver.ParseSpecs(args)
	if err != nil {
		return err
	}
	builder, err := suiteBuilder("attnc bench", bf.target, bf.gpu, "", nil, bf.cfg)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "attnc-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	stdout := c.OutOrStdout()
	opts := bench.Options{Batch: bf.batch, KVLen: bf.kvLen, QLen: bf.qLen, Seconds: bf.seconds, Seed: bf.seed}
	failed := false
	for _, v := range vs {
		if err := lower.Unsupported(v); err != nil {
			fmt.Fprintf(stdout, "skip %s: %v\n", v.Name, err)
			continue
		}
		dir, err := os.MkdirTemp(tmp, v.Name+"-")
		if err != nil {
			return err
		}
		s, err := builder(v, dir)
		if err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "attnc bench: %s: build: %v\n", v.Name, err)
			failed = true
			continue
		}
		r, err := bench.RunDevice(s, opts)
		s.Close()
		if err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "attnc bench: %s: %v\n", v.Name, err)
			failed = true
			continue
		}
		fmt.Fprint(stdout, r.String())
	}
	if failed {
		return errReported
	}
	return nil
}
