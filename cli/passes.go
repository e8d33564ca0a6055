package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/attnc/attnc/passes"
	"github.com/spf13/cobra"
)

func newPassesCmd(cfg *config) *cobra.Command {
	return &cobra.Command{
		Use:   "passes",
		Short: "List the pass pipeline in order, with its ordering constraints",
		Long: `Print the pass table that every variant's kernel IR goes through after
lowering, in the order the passes run: index, name, whether the pass is
required (the backends cannot print IR that skipped it) or optional, and
what it does. Then print the ordering constraints between passes with the
reason for each; a test checks that the table satisfies them.

The names are the values 'attnc build --print-after' accepts. The table
lives in passes/pipeline.go.`,
		Example: `  attnc passes
  attnc build examples/llama3_8b.attn -o out --print-after=simplify`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			table, err := cfg.table("cpu")
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
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
			fmt.Fprintln(c.OutOrStdout(), "\nordering constraints:")
			for _, k := range passes.Constraints {
				fmt.Fprintf(c.OutOrStdout(), "  %s before %s: %s\n", k.Before, k.After, k.Why)
			}
			return nil
		},
	}
}
