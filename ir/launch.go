package ir

// Launch is one kernel launch of a GPU host launcher.
type Launch struct {
	Kernel string
	Grid   string // C expression over the launcher's arguments and locals
	Block  int    // threads per block (the kernel's threads loop size)
	Smem   int    // dynamic shared memory bytes
}

// Launcher is a GPU host entry point `<Name>(params..., stream)`: it checks
// the cheap scalar inputs, then runs Direct, or, when Split is set and the
// @plan_splits rule (threads = 2 x SM count) asks for more than one chunk,
// allocates the f32 scratch (part_o, part_lse) and runs Split. Launchers
// are host code: they are not part of the kernel-IR text form and passes do
// not rewrite them.
type Launcher struct {
	Name   string
	Role   Role
	Params []*Param
	Checks []Check // cheap scalar checks, in order
	Skip   Expr    // nothing to do: return 0 without launching
	Direct []Launch
	Split  []Launch
}

// Check returns Code when Fail (a bool over scalar params) holds.
type Check struct {
	Fail Expr
	Code int
}
