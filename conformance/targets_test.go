package conformance

// The targets the tests build for, registered as attnc registers them.
import (
	_ "github.com/attnc/attnc/targets/cpu"
	_ "github.com/attnc/attnc/targets/cuda"
	_ "github.com/attnc/attnc/targets/hip"
)
