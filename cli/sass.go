package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/targets"
	"github.com/spf13/cobra"
)

// newMachineCodeCmds adds one command per registered target that can
// assemble its kernels and read the machine code back here
// (targets.MachineCode: attnc sass for CUDA).
func newMachineCodeCmds(cfg *config) []*cobra.Command {
	var cs []*cobra.Command
	for _, t := range targets.All() {
		if mc, ok := t.(targets.MachineCode); ok {
			cs = append(cs, newMachineCodeCmd(cfg, t.Name(), mc))
		}
	}
	return cs
}

func newMachineCodeCmd(cfg *config, target string, mc targets.MachineCode) *cobra.Command {
	mcmd := mc.MachineCommand()
	name := mcmd.Name
	var archs []string
	var check bool
	c := &cobra.Command{
		Use:     mcmd.Use,
		Short:   mcmd.Short,
		Long:    mcmd.Long,
		Example: mcmd.Example,
		Args:    specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			archs = splitList(archs)
			if len(archs) == 0 {
				return fmt.Errorf("attnc %s: --arch is empty", name)
			}
			for _, a := range archs {
				if !slices.Contains(mcmd.Archs, a) {
					return fmt.Errorf("attnc %s: unknown --arch %q (known: %s)", name, a, strings.Join(mcmd.Archs, ", "))
				}
			}
			vs, err := driver.ParseSpecs(args)
			if err != nil {
				return err
			}
			tools, err := mc.MachineTools()
			if err != nil {
				return fmt.Errorf("attnc %s: %w", name, err)
			}
			tmp, err := os.MkdirTemp("", "attnc-"+name+"-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			stdout := c.OutOrStdout()
			var unmet []string
			for _, v := range vs {
				if err := lower.Unsupported(v); err != nil {
					fmt.Fprintf(stdout, "skip %s: %v\n", v.Name, err)
					continue
				}
				// What build writes for the target, user passes included.
				r, err := attnc.CompileVariants([]*ir.Variant{v}, attnc.Options{Targets: []string{target}, Insert: cfg.insert})
				if err != nil {
					return err
				}
				var files []targets.Artifact
				for _, n := range r.Names() {
					files = append(files, targets.Artifact{Name: n, Data: r.Files[n]})
				}
				fmt.Fprintf(stdout, "%s %s dtype=%s %s\n", name, v.Name, v.DType, tools.Describe())
				u, err := tools.Check(stdout, v, files, r.Manifest.Kernels, archs, tmp)
				if err != nil {
					return err
				}
				unmet = append(unmet, u...)
			}
			if !check {
				return nil
			}
			for _, u := range unmet {
				fmt.Fprintf(stdout, "target not met: %s\n", u)
			}
			if len(unmet) > 0 {
				fmt.Fprintf(c.ErrOrStderr(), "attnc %s: %d machine-code targets not met\n", name, len(unmet))
				return errReported
			}
			fmt.Fprintln(stdout, "all targets met")
			return nil
		},
	}
	c.Flags().StringSliceVar(&archs, "arch", mcmd.DefaultArchs, "GPU architectures to assemble for (comma list)")
	c.Flags().BoolVar(&check, "check", false, "test the machine-code targets; exit 1 if any is not met")
	return c
}
