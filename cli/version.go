package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/attnc/attnc/registry"
	"github.com/spf13/cobra"
)

// Version is attnc's release; the module version replaces it when attnc is
// installed with `go install github.com/attnc/attnc/cmd/attnc@vX.Y.Z`.
const Version = "0.1.0-dev"

func version() string {
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("attnc %s (artifact ABI %d, %s %s/%s)", v, registry.ABI, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print attnc's version and the artifact ABI it writes",
		Long: `Print attnc's version, the ABI version of the artifacts it generates
(manifest.json "abi"), and the Go toolchain it was built with.`,
		Example: "  attnc version",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), version())
			return nil
		},
	}
}
