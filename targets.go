package attnc

// The built-in targets register themselves (targets.Register) when
// imported, the way database/sql drivers do; the library and every command
// built on it (cmd/attnc through cli) get them from these lines. A new
// target is a package under targets/ and one line here.
import (
	_ "github.com/attnc/attnc/targets/cpu"
	_ "github.com/attnc/attnc/targets/cuda"
	_ "github.com/attnc/attnc/targets/hip"
)
