package cpu

import (
	"os"
	"testing"

	"github.com/attnc/attnc/cpurt"
	_ "github.com/attnc/attnc/internal/testgc"
)

// TestMain compiles the kernel IR its tests build through the run's object
// cache (cpurt.RunObjectCache): opt and llc run once per distinct IR in
// this package and in the other packages of the same `go test` run.
func TestMain(m *testing.M) { os.Exit(cpurt.WithRunObjects(m.Run)) }
