package cli

import (
	"fmt"

	"github.com/attnc/attnc/build"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/spf13/cobra"
)

func newCheckCmd(cfg *config) *cobra.Command {
	return &cobra.Command{
		Use:   "check SPEC...",
		Short: "Validate specs and report whether each variant can be compiled",
		Long: `Parse and validate every spec file, then check each variant against what
this version of attnc generates kernels for, and run it through lowering and
the pass pipeline (without writing anything).

Prints "ok <variant>" for each variant that 'attnc build' will compile. A
syntax or validation error, or a feature that is accepted by the language
but not generated yet (mla, mask tree/custom, rope, sinks learned,
table = block_table, append/copy_page kernels), is printed as
file:line:col: message on stderr, and attnc exits with status 1. Every
variant is checked even when an earlier one fails.`,
		Example: `  attnc check examples/llama3_8b.attn
  attnc check examples/*.attn`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			vs, err := build.ParseSpecs(args)
			if err != nil {
				return err
			}
			table, err := cfg.table("cpu")
			if err != nil {
				return err
			}
			failed := false
			for _, v := range vs {
				err := lower.Unsupported(v)
				if err == nil {
					_, err = build.CompileWith(v, table, passes.Options{})
				}
				if err != nil {
					fmt.Fprintln(c.ErrOrStderr(), err)
					failed = true
					continue
				}
				fmt.Fprintf(c.OutOrStdout(), "ok %s\n", v.Name)
			}
			if failed {
				return errReported
			}
			return nil
		},
	}
}
