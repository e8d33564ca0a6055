package cli

import (
	"fmt"

	"github.com/attnc/attnc/build"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/target"
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
syntax or validation error, or a combination that is accepted by the
language but not generated yet (rope inline with mla, the page kernels with
mla), is printed as file:line:col: message on stderr, and attnc exits with
status 1. Every file and every variant is checked even when an earlier one
fails; a variant name used again in a later file is an error there.`,
		Example: `  attnc check examples/llama3_8b.attn
  attnc check examples/*.attn`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			failed := false
			report := func(err error) {
				fmt.Fprintln(c.ErrOrStderr(), err)
				failed = true
			}
			seen := map[string]ir.Pos{}
			for _, path := range args {
				vs, err := build.ParseSpecs([]string{path})
				if err != nil {
					report(err)
					continue
				}
				for _, v := range vs {
					if first, dup := seen[v.Name]; dup {
						report(ir.Errorf(v.Pos, "variant %s already defined at %s", v.Name, first))
						continue
					}
					seen[v.Name] = v.Pos
					err := lower.Unsupported(v)
					for _, t := range target.All() {
						if err != nil {
							break
						}
						table, terr := cfg.table(t.Name())
						if terr != nil {
							return terr
						}
						_, err = build.Compile(v, t, build.Options{Tables: map[string][]passes.Pass{t.Name(): table}})
					}
					if err != nil {
						report(err)
						continue
					}
					fmt.Fprintf(c.OutOrStdout(), "ok %s\n", v.Name)
				}
			}
			if failed {
				return errReported
			}
			return nil
		},
	}
}
