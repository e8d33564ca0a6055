package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/attnc/attnc/registry"
	"github.com/spf13/cobra"
)

// version is the line `attnc version` prints: attnc's module version,
// the artifact ABI and the Go toolchain.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	return fmt.Sprintf("attnc %s (artifact ABI %d, %s %s/%s)", moduleVersion(bi, ok), registry.ABI, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// moduleVersion is the version of the github.com/attnc/attnc module the
// binary was built from, as the go command records it: vX.Y.Z for
// `go install github.com/attnc/attnc/cmd/attnc@vX.Y.Z`, a pseudo-version
// for a build from a git checkout, "(devel)" when it records none.
func moduleVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "(devel)"
	}
	if bi.Main.Path == attncModule && bi.Main.Version != "" {
		return bi.Main.Version
	}
	// attnc built as a dependency of another main module (a custom attnc
	// with cli.WithPasses): the version its go.mod requires.
	for _, d := range bi.Deps {
		if d.Path == attncModule {
			if d.Replace != nil {
				return strings.TrimSpace(d.Version + " => " + d.Replace.Path + " " + d.Replace.Version)
			}
			return d.Version
		}
	}
	if bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// attncModule is attnc's module path.
const attncModule = "github.com/attnc/attnc"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print attnc's version and the artifact ABI it writes",
		Long: `Print attnc's version, the ABI version of the artifacts it generates
(manifest.json "abi"), and the Go toolchain it was built with.

The version is the module version the go command recorded in the binary:
vX.Y.Z when installed with
go install github.com/attnc/attnc/cmd/attnc@vX.Y.Z, a pseudo-version
(v0.0.0-DATE-COMMIT, +dirty for uncommitted changes) when built from a git
checkout, "(devel)" when none was recorded.`,
		Example: "  attnc version",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), version())
			return nil
		},
	}
}
