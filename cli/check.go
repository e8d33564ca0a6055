package cli

import (
	"fmt"
	"strings"

	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/targets"
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
language but not generated yet (rope inline with mla), is printed as
file:line:col: message on stderr, and attnc exits with status 1. Every file and every variant is checked even when an earlier one
fails, and every error of a variant is reported; a variant name used again
in a later file (also in another case) is an error there. A file that is not
a regular file, or that holds no variant, is an error.`,
		Example: `  attnc check examples/llama3_8b.attn
  attnc check examples/*.attn`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			failed := false
			report := func(err error) {
				fmt.Fprintln(c.ErrOrStderr(), errorText(c, err))
				failed = true
			}
			seen := map[string]*ir.Variant{}
			for _, path := range args {
				src, err := frontend.ReadSpec(path)
				if err != nil {
					report(err)
					continue
				}
				cs, err := frontend.ParseEach(path, src)
				if err != nil {
					report(err)
					continue
				}
				for _, cv := range cs {
					for _, e := range cv.Errs {
						report(e)
					}
					v := cv.Variant
					if v == nil {
						continue
					}
					key := strings.ToLower(v.Name)
					if first, dup := seen[key]; dup && first.Name == v.Name {
						report(ir.Errorf(v.Pos, "variant %s already defined at %s", v.Name, first.Pos))
						continue
					} else if dup {
						report(ir.Errorf(v.Pos, "variant %s collides with %s (defined at %s): names must differ in more than case, since they name C macros and include guards", v.Name, first.Name, first.Pos))
						continue
					}
					seen[key] = v
					err := lower.Unsupported(v)
					for _, t := range targets.All() {
						if err != nil {
							break
						}
						table, terr := cfg.table(t.Name())
						if terr != nil {
							return terr
						}
						_, err = driver.Compile(v, t, driver.Options{Tables: map[string][]passes.Pass{t.Name(): table}})
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
