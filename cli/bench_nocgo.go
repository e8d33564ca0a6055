//go:build !cgo

package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func runBench(c *cobra.Command, args []string, bf benchFlags) error {
	return fmt.Errorf("attnc bench: this attnc was built without cgo and cannot load kernels; install gcc and rebuild with CGO_ENABLED=1")
}
