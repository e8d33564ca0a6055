package ir

// Plan is how one role's entry point runs: the checks it makes, the work
// kernels it launches and how many work items each gets, and the split-KV
// rule. Lowering computes it once, from the same expressions the kernels
// use; each target assembles its entry from it (the CPU an entry kernel
// that runs work items on its thread pool, CUDA a host launcher), the
// manifest prints it and registry.Select evaluates it for a call shape.
//
// Plan expressions range over the entry's scalar parameters, the Seq
// values, PlanThreads (the target's worker count: CPU threads, or 2 x the
// GPU's multiprocessors) and, inside Split, PlanSplits.
type Plan struct {
	Role   Role
	Entry  string   // the entry symbol
	Public bool     // the role's public entry (else only another plan hands over to it)
	Params []*Param // the entry's parameters in ABI order
	// Checks are cheap scalar checks, run in order before anything else
	// (on a GPU by the host launcher).
	Checks []Check
	// Validate checks the buffers an entry can read on the host (the CPU
	// entry runs it; GPU kernels clamp instead, since their tables live in
	// device memory): it returns a status and computes the Seq values.
	Validate *Block
	// Seq are values computed over every sequence's lengths.
	Seq []SeqValue
	// Limits are checks over the scalar params and the Seq values, run
	// after Validate: the work fits the parallel loops (StatusTooLarge).
	// A GPU launcher runs those it can evaluate with the Seq values' host
	// stand-ins; a kernel whose item count it cannot evaluate clamps it.
	Limits []Check
	// Skip (over scalar params) means there is nothing to do: return 0.
	Skip Expr
	// Handoff runs another role's entry instead, with the same arguments
	// by name, when its condition holds.
	Handoff *Handoff
	// Direct are the launches when there is no split.
	Direct []Launch
	// Split, when set, splits the KV range of each item.
	Split *Split
}

// SeqValue is Op folded over every sequence b of Of, an i32 expression over
// b, q_beg, q_len and kv_len (that sequence's query offset and lengths).
// Host is what a host launcher uses instead, since it cannot read the
// lengths from device memory; nil when no stand-in exists (a launch whose
// item count needs it loops over its items in the kernel, grid-stride, and
// a handoff that needs it does not happen).
type SeqValue struct {
	Name string
	Op   ReduceOp
	Of   Expr
	Host Expr
}

// The per-sequence names a SeqValue's Of may use.
const (
	SeqB     = "b"
	SeqQBeg  = "q_beg"
	SeqQLen  = "q_len"
	SeqKVLen = "kv_len"
)

// The plan-level names targets bind.
const (
	PlanThreads = "threads" // workers: CPU threads, or 2 x the GPU's multiprocessors
	PlanSplits  = "splits"  // KV chunks per item, inside Split
)

// Handoff is a plan's hand-over to another role's entry.
type Handoff struct {
	Role Role
	When Expr
}

// Launch runs a work kernel over Items work items. The kernel's arguments
// are bound by name from the entry's parameters, the plan's scratch
// buffers and PlanSplits, except those Bind names. Items is the
// expression the kernel's own parallel loop runs to.
type Launch struct {
	Kernel string
	Items  Expr
	Bind   []Bind
}

// Bind gives one parameter of a launched kernel its argument: a scalar
// parameter Value (an i32 expression over the plan's names), a buffer
// parameter NULL when Value is nil (the kernel declares it Null and
// stores to it only under `if NotNull(...)`: one work kernel serves
// launches that write different buffers, decode's direct and split-KV
// launches).
type Bind struct {
	Param string
	Value Expr
}

// BindOf is l's Bind of the parameter name, if it has one.
func (l Launch) BindOf(name string) (Bind, bool) {
	for _, b := range l.Bind {
		if b.Param == name {
			return b, true
		}
	}
	return Bind{}, false
}

// Split is the split-KV step: Splits (with PlanThreads bound; typically a
// call of the @plan_splits Def) KV chunks per item; when it is above 1
// the plan allocates Scratch, runs Launches and frees the scratch, else it
// runs the plan's Direct launches.
type Split struct {
	Splits   Expr
	Scratch  []Scratch
	Launches []Launch
}

// Scratch is a temporary buffer of Size (an i64 expression) elements of T.
type Scratch struct {
	Name string
	T    Type
	Size Expr
}

// Plan finds the plan of a role.
func (m *Module) Plan(r Role) *Plan {
	for _, p := range m.Plans {
		if p.Role == r {
			return p
		}
	}
	return nil
}
