package driver

import (
	"fmt"
	"os"
	"testing"

	_ "github.com/attnc/attnc/internal/testgc"
	"github.com/attnc/attnc/internal/toolcache"
)

// TestMain compiles each CUDA source to PTX, and assembles each PTX with
// ptxas and cuobjdump, once per architecture for all of the package's
// tests (TestCUDAToPTX and TestSASS compile the same examples) and the
// other packages of the same `go test` run (cli's sass command assembles
// llama3_8b too): internal/toolcache keeps them by the input's content,
// the architecture and the tools' versions.
func TestMain(m *testing.M) {
	restore, err := toolcache.Install()
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver: CUDA toolchain cache:", err)
		os.Exit(2)
	}
	code := m.Run()
	restore()
	os.Exit(code)
}
