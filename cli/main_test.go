package cli

import (
	"fmt"
	"os"
	"testing"

	"github.com/attnc/attnc/cpurt"
	_ "github.com/attnc/attnc/internal/testgc"
	"github.com/attnc/attnc/internal/toolcache"
)

// TestMain compiles the kernel IR its tests build through the run's object
// cache (cpurt.RunObjectCache), and the CUDA sources `attnc sass` compiles
// to PTX and assembles through the run's CUDA toolchain cache
// (internal/toolcache): clang, ptxas, cuobjdump, opt and llc run once per
// distinct input in this package and in the other packages of the same
// `go test` run (driver assembles the same examples).
func TestMain(m *testing.M) {
	restore, err := toolcache.Install()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cli: CUDA toolchain cache:", err)
		os.Exit(2)
	}
	code := cpurt.WithRunObjects(m.Run)
	restore()
	os.Exit(code)
}
