package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/attnc/attnc/targets"
	"github.com/spf13/cobra"
)

func newPassesCmd(cfg *config) *cobra.Command {
	var targetList []string
	c := &cobra.Command{
		Use:   "passes [--target T]",
		Short: "List each target's pass table in order, with its ordering constraints",
		Long: `Print the pass table every variant's kernel IR goes through after
lowering, for each target (or the --target ones): index, name, whether the
pass is required (the backend cannot print IR that skipped it) or
optional, and what it does (user passes of a custom attnc included). Then
print the table's ordering constraints with the reason for each; a test
checks every table against them.

Lowering builds one target-neutral module; the neutral passes (inline-defs,
simplify, classify-tiles, expand-calls, legalize-dtype, late-simplify) run
in every table, and each target adds its schedule passes between them.
The names are the values 'attnc build --print-after' accepts. The tables
live in targets/<name>/<name>.go.`,
		Example: `  attnc passes
  attnc passes --target cuda
  attnc build examples/llama3_8b.attn -o out --target cuda --print-after=map-threads`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			names := splitList(targetList)
			if len(names) == 0 {
				names = targets.Names()
			}
			out := c.OutOrStdout()
			for i, n := range names {
				t, err := targets.Lookup(n)
				if err != nil {
					return fmt.Errorf("attnc passes: %w", err)
				}
				table, err := cfg.table(n)
				if err != nil {
					return err
				}
				if i > 0 {
					fmt.Fprintln(out)
				}
				fmt.Fprintf(out, "target %s (writes %s):\n", t.Name(), t.Files())
				w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "#\tpass\tkind\tdescription")
				for i, p := range table {
					kind := "optional"
					if p.Required {
						kind = "required"
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", i+1, p.Name, kind, p.Desc)
				}
				if err := w.Flush(); err != nil {
					return err
				}
				fmt.Fprintln(out, "\nordering constraints:")
				for _, k := range t.Constraints() {
					fmt.Fprintf(out, "  %s before %s: %s\n", k.Before, k.After, k.Why)
				}
			}
			return nil
		},
	}
	c.Flags().StringSliceVar(&targetList, "target", nil, "comma list of targets whose tables to print (default: every target)")
	return c
}
