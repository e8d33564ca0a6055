package main

import (
	"github.com/spf13/cobra"
)

// verifyFlags are the options of `attnc verify`.
type verifyFlags struct {
	threads []int
	seed    int64
}

func newVerifyCmd() *cobra.Command {
	var vf verifyFlags
	c := &cobra.Command{
		Use:   "verify SPEC... [--threads 1,4] [--seed N]",
		Short: "Build each variant's CPU kernels and check them against the reference",
		Long: `Compile every supported variant for the CPU, link it into a shared
library (LLVM 14 opt/llc and gcc are required), and run each kernel on
random paged caches against the float64 reference implementation: ragged
prefill with empty sequences, shared prefixes, queries spanning pages and
tiles, decode batches with split KV, merge_state with empty states, NaN/Inf
in unused slots and pages, and bad inputs that must return the documented
status code. Each case runs at every --threads count.

One line is printed per case (PASS/FAIL, kernel, case, threads, max error
of o and lse, tolerance for the dtype), then "N passed, M failed".
Variants using features that do not generate kernels yet are reported as
"skip <variant>: <reason>" and do not fail the run. attnc exits with status
1 if any case failed or the tools are missing. The same --seed gives the
same inputs.`,
		Example: `  attnc verify examples/llama3_8b.attn
  attnc verify examples/*.attn --threads 1,2,8 --seed 7`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return runVerify(c, args, vf)
		},
	}
	c.Flags().IntSliceVar(&vf.threads, "threads", []int{1, 4}, "thread counts to run every case at (comma list)")
	c.Flags().Int64Var(&vf.seed, "seed", 1, "random seed of the generated inputs")
	return c
}
