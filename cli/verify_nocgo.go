//go:build !cgo

package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// cgoEnabled says whether this binary can load generated kernels.
const cgoEnabled = false

func runVerify(c *cobra.Command, args []string, vf verifyFlags) error {
	return fmt.Errorf("attnc verify: this attnc was built without cgo and cannot load kernels; install gcc and rebuild with CGO_ENABLED=1")
}
