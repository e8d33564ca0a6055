package driver

import "flag"

// update is accepted so that `go test ./... -update`, which regenerates the
// golden files of the packages that have them, runs here too.
var _ = flag.Bool("update", false, "regenerate golden files (none in this package)")
