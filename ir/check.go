package ir

// Check returns Code when Fail (a bool over scalar params) holds.
type Check struct {
	Fail Expr
	Code int
}
