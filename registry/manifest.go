package registry

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/attnc/attnc/ir"
)

// ABI is the artifact ABI version (DESIGN §4).
const ABI = 1

// Manifest is manifest.json.
type Manifest struct {
	ABI int `json:"abi"`
	// LSEBase is the base of every lse argument in the build: "e" or "2"
	// when all variants agree (an empty build says "e"), "mixed" when they
	// do not; each variant's own base is in Variants[i].LSEBase and in
	// every kernel's constraints.
	LSEBase string `json:"lse_base"`
	// Targets has one section per generated target (cpu, cuda).
	Targets  map[string]TargetManifest `json:"targets"`
	Variants []VariantManifest         `json:"variants"`
	Kernels  []KernelManifest          `json:"kernels"`
}

// TargetManifest is a target's section of the manifest: the target triple
// of the code (cpu) and the passes every module of that target went
// through, in order, user passes included.
type TargetManifest struct {
	Triple string   `json:"triple,omitempty"`
	Passes []string `json:"passes"`
	// Levels (cpu) are the CPU levels the work kernels are cloned for,
	// baseline first; the entries run the best one the CPU supports.
	Levels []string `json:"levels,omitempty"`
}

// VariantManifest records a variant's shape constraints and dispatch rules.
type VariantManifest struct {
	Name        string            `json:"name"`
	LSEBase     string            `json:"lse_base"`
	Constraints map[string]any    `json:"constraints"`
	Rules       map[string]string `json:"rules"`
	Errors      []ir.ErrorCode    `json:"errors"`
	// Reclaim is the variant's page-reclaim rule (ReclaimableRange); absent
	// when no page ever stops being visible.
	Reclaim *ReclaimRule `json:"reclaim,omitempty"`
}

// KernelManifest is one generated function.
type KernelManifest struct {
	Variant     string         `json:"variant"`
	Role        string         `json:"role"`
	Symbol      string         `json:"symbol"`
	Entry       bool           `json:"entry"`
	Target      string         `json:"target"`
	File        string         `json:"file"`
	Args        []Arg          `json:"args"`
	Returns     string         `json:"returns"`
	Constraints map[string]any `json:"constraints"`
	// Plan is how an entry runs its work kernels (entries only).
	Plan *PlanManifest `json:"plan,omitempty"`
	// Launch is how a GPU device kernel is launched.
	Launch *LaunchManifest `json:"launch,omitempty"`
	// StackBytes (CPU) bounds the stack one call needs on the calling
	// thread; large scratch lives on the heap.
	StackBytes int64 `json:"stack_bytes,omitempty"`
	// Level (cpu) is the CPU level a clone of a work kernel is compiled
	// for; the plans name work kernels without the level's suffix.
	Level string `json:"level,omitempty"`
}

// PlanManifest is an ir.Plan in manifest form: expressions in the kernel
// IR's text form over the entry's scalar arguments, the seq values,
// "threads" and "splits".
type PlanManifest struct {
	Checks   []CheckManifest  `json:"checks,omitempty"`
	Validate bool             `json:"validate,omitempty"` // the entry validates every table it reads
	Seq      []SeqManifest    `json:"seq,omitempty"`
	Limits   []CheckManifest  `json:"limits,omitempty"` // checks after validation: the work fits
	Skip     string           `json:"skip,omitempty"`
	Handoff  *HandoffManifest `json:"handoff,omitempty"`
	Direct   []LaunchManifest `json:"direct"`
	Split    *SplitManifest   `json:"split,omitempty"`
	Threads  string           `json:"threads,omitempty"` // what "threads" is on this target
}

// CheckManifest is one scalar check: Code when Fail holds.
type CheckManifest struct {
	Fail string `json:"fail"`
	Code int    `json:"code"`
}

// SeqManifest is a value folded over every sequence (Op of Of over b,
// q_beg, q_len, kv_len); Host is the stand-in a host launcher uses.
type SeqManifest struct {
	Name string `json:"name"`
	Op   string `json:"op"`
	Of   string `json:"of"`
	Host string `json:"host,omitempty"`
}

// HandoffManifest: the entry runs Role's entry instead when When holds.
type HandoffManifest struct {
	Role string `json:"role"`
	When string `json:"when"`
}

// LaunchManifest is a work kernel run over Items work items; on a GPU
// also its grid rule, block size and dynamic shared memory.
type LaunchManifest struct {
	Kernel string `json:"kernel,omitempty"`
	Items  string `json:"items,omitempty"`
	// Bind is the arguments the launch gives some of the kernel's
	// parameters instead of the entry's or the plan's of the same name: a
	// value (an expression), or null for a NULL buffer.
	Bind  map[string]*string `json:"bind,omitempty"`
	Grid  string             `json:"grid,omitempty"`
	Block int                `json:"block,omitempty"`
	Smem  int                `json:"smem,omitempty"`
	// GPU: the kernel's __launch_bounds__(block, MinBlocksPerSM), the
	// register budget per thread that bound gives the assembler, and the
	// occupancy every architecture then guarantees at least (by name,
	// e.g. "sm_80").
	MinBlocksPerSM int                          `json:"min_blocks_per_sm,omitempty"`
	MaxRegisters   int                          `json:"max_registers,omitempty"`
	Occupancy      map[string]OccupancyManifest `json:"occupancy,omitempty"`
}

// OccupancyManifest is a launch's guaranteed residency on one GPU
// architecture: blocks and warps per SM, and what limits them.
type OccupancyManifest struct {
	BlocksPerSM int    `json:"blocks_per_sm"`
	WarpsPerSM  int    `json:"warps_per_sm"`
	Limit       string `json:"limit"`
}

// SplitManifest is the split-KV step.
type SplitManifest struct {
	Splits   string            `json:"splits"`
	Scratch  []ScratchManifest `json:"scratch"`
	Launches []LaunchManifest  `json:"launches"`
}

// ScratchManifest is a temporary buffer of Size elements.
type ScratchManifest struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Size  string `json:"size"`
}

// PlanOptions say how a target's entry runs a plan.
type PlanOptions struct {
	Threads string // what "threads" is on the target
	// Lengths says the entry validates the tables and reads the sequence
	// lengths (CPU); else it uses the seq values' host stand-ins and a
	// hand-over that needs lengths does not happen.
	Lengths bool
	// Launch fills the target's part of a launch (nil: kernel and items).
	Launch func(ir.Launch) LaunchManifest
}

// bindManifest renders a launch's Bind: each parameter's value, nil for
// NULL; nil when there is none.
func bindManifest(bs []ir.Bind) map[string]*string {
	if len(bs) == 0 {
		return nil
	}
	out := map[string]*string{}
	for _, b := range bs {
		var v *string
		if b.Value != nil {
			x := ir.ExprString(b.Value)
			v = &x
		}
		out[b.Param] = v
	}
	return out
}

// PlanOf renders a plan as a target's entry runs it.
func PlanOf(p *ir.Plan, o PlanOptions) *PlanManifest {
	launch := o.Launch
	if launch == nil {
		launch = func(l ir.Launch) LaunchManifest {
			return LaunchManifest{Kernel: l.Kernel, Items: ir.ExprString(l.Items)}
		}
	}
	base := launch
	launch = func(l ir.Launch) LaunchManifest {
		lm := base(l)
		lm.Bind = bindManifest(l.Bind)
		return lm
	}
	pm := &PlanManifest{Validate: p.Validate != nil && o.Lengths, Threads: o.Threads}
	for _, c := range p.Checks {
		pm.Checks = append(pm.Checks, CheckManifest{Fail: ir.ExprString(c.Fail), Code: c.Code})
	}
	avail := map[string]bool{}
	for _, s := range p.Seq {
		sm := SeqManifest{Name: s.Name, Op: s.Op.String(), Of: ir.ExprString(s.Of)}
		if s.Host != nil && !o.Lengths {
			sm.Host = ir.ExprString(s.Host)
		}
		avail[s.Name] = o.Lengths || s.Host != nil
		pm.Seq = append(pm.Seq, sm)
	}
	for _, c := range p.Limits {
		if usable(c.Fail, avail) {
			pm.Limits = append(pm.Limits, CheckManifest{Fail: ir.ExprString(c.Fail), Code: c.Code})
		}
	}
	if p.Skip != nil {
		pm.Skip = ir.ExprString(p.Skip)
	}
	if h := p.Handoff; h != nil {
		if usable(h.When, avail) {
			pm.Handoff = &HandoffManifest{Role: string(h.Role), When: ir.ExprString(h.When)}
		}
	}
	for _, l := range p.Direct {
		pm.Direct = append(pm.Direct, launch(l))
	}
	if s := p.Split; s != nil {
		sm := &SplitManifest{Splits: ir.ExprString(s.Splits)}
		for _, sc := range s.Scratch {
			sm.Scratch = append(sm.Scratch, ScratchManifest{Name: sc.Name, DType: sc.T.String(), Size: ir.ExprString(sc.Size)})
		}
		for _, l := range s.Launches {
			sm.Launches = append(sm.Launches, launch(l))
		}
		pm.Split = sm
	}
	return pm
}

// usable reports whether the entry can evaluate e: every seq value it
// names is available (avail[name] is false for one the entry lacks).
func usable(e ir.Expr, avail map[string]bool) bool {
	ok := true
	ir.VisitExpr(e, func(n ir.Expr) {
		if r, isRef := n.(*ir.Ref); isRef {
			if have, isSeq := avail[r.Name]; isSeq && !have {
				ok = false
			}
		}
	})
	return ok
}

// Arg is one argument in call order.
type Arg struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"` // buffer | scalar
	DType    string   `json:"dtype"`
	Shape    []string `json:"shape,omitempty"`
	Output   bool     `json:"output,omitempty"`
	Nullable bool     `json:"nullable,omitempty"`
}

// Args converts kernel params (of the lowered, pre-legalization module,
// whose dtypes are the storage types) to manifest args.
func Args(k *ir.Kernel) []Arg { return ArgsOf(k.Params) }

// ArgsOf converts a parameter list to manifest args.
func ArgsOf(params []*ir.Param) []Arg {
	var out []Arg
	for _, p := range params {
		a := Arg{Name: p.Name, Kind: "scalar", DType: p.Elem.String()}
		if p.Buffer {
			a.Kind = "buffer"
			a.Shape = p.Shape
			a.Output = p.Output
			a.Nullable = p.Null
		}
		out = append(out, a)
	}
	return out
}

// Constraints are the fixed facts a variant's kernels assume: its shapes,
// its scale and lse base, and what decides the values it computes beyond
// them — mask (the mask line's clauses, spec style: "causal", "none",
// "tree", "custom", "window(left = W)", "expr(E)" with E in the IR's text
// form), sinks ("tokens(N)" or "learned", when the spec has them), score
// (the score expression in the IR's text form, when the spec has one) and
// rope ("inline" or "at_append" with rope_style, rope_theta, rope_params,
// rope_pairs and rope_dim, when the spec rotates); a quantized cache adds
// its kv_dtype and kv_scale. A caller that runs a compiled variant in
// place of one it would write (the Python package's FlashInfer wrappers'
// plan(..., variant=v)) compares these with what it was asked for.
func Constraints(v *ir.Variant) map[string]any {
	c := map[string]any{
		"qo_heads":    v.QOHeads,
		"kv_heads":    v.KVHeads,
		"head_dim_qk": v.HeadDimQK,
		"head_dim_v":  v.HeadDimV,
		"dtype":       v.DType.String(),
		"page_size":   v.PageSize,
		"layout":      v.Layout.String(),
		"table":       v.Table.String(),
		"scale":       float64(float32(v.Scale)),
		"lse_base":    v.LSEBase.String(),
	}
	if v.Quantized() {
		c["kv_dtype"] = v.KVDType.String()
		c["kv_scale"] = v.KVScale.String()
	}
	c["mask"] = MaskClauses(v)
	if s := v.Sinks; s != nil {
		c["sinks"] = "learned"
		if s.Kind == ir.SinkTokens {
			c["sinks"] = fmt.Sprintf("tokens(%d)", s.Tokens)
		}
	}
	if v.Score != nil {
		c["score"] = ir.ExprString(literalFloats(v.Score))
	}
	if r := v.Rope; r != nil {
		c["rope"] = "inline"
		if r.AtAppend {
			// The cache holds rotated K and the attention entries take q
			// rotated (qkv_append's q_out): they rotate nothing.
			c["rope"] = "at_append"
		}
		c["rope_style"] = ropeStyleNames[r.Style]
		if r.Style != ir.RopeTable {
			c["rope_theta"] = r.Theta
		}
		params := map[string]float64{}
		for k, x := range r.Params {
			if k != "theta" {
				params[k] = x
			}
		}
		if r.Style == ir.RopeYarn && r.Untruncated {
			params["truncate"] = 0
		}
		if len(params) > 0 {
			c["rope_params"] = params
		}
		c["rope_pairs"] = r.Pairs.String()
		c["rope_dim"] = r.Dim(v.HeadDimQK)
	}
	if n := v.QKNorm; n != nil {
		c["qk_norm_eps"] = n.Eps
		c["qk_norm_offset"] = n.Offset
	}
	if len(v.Params) > 0 {
		c["params"] = ParamDecls(v)
	}
	return c
}

// literalFloats writes e's integer literals converted to a float type as
// float literals (softcap(score, 20): @softcap.f32(score, 20.0:f32), as
// softcap(score, 20.0) prints), so that a score reads the same however
// its numbers were spelled.
func literalFloats(e ir.Expr) ir.Expr {
	return ir.MapExpr(e, func(x ir.Expr) ir.Expr {
		if cv, ok := x.(*ir.Convert); ok && !cv.To.IsVector() && cv.To.IsFloat() {
			if k, isConst := cv.X.(*ir.Const); isConst && k.T.IsInt() {
				f := float64(k.Int)
				if cv.To == ir.F32 {
					f = float64(float32(f))
				}
				return &ir.Const{T: cv.To, Float: f}
			}
		}
		return x
	})
}

// ropeStyleNames are the RoPE styles as a spec names them (table: rope
// inline(table, ...)).
var ropeStyleNames = map[ir.RopeStyle]string{ir.RopeNormal: "normal", ir.RopeLlama3: "llama3", ir.RopeYarn: "yarn",
	ir.RopeFactors: "factors", ir.RopeTable: "table"}

// MaskClauses lists v's mask clauses as a spec writes them: "causal",
// "none", "tree", "custom", "window(left = W)" (window(size = S) as its
// left = S - 1) and "expr(E)", E in the IR's text form (a binary
// expression without its outer parentheses).
func MaskClauses(v *ir.Variant) []string {
	out := make([]string, 0, len(v.Masks))
	for _, m := range v.Masks {
		switch m.Kind {
		case ir.MaskWindow:
			out = append(out, fmt.Sprintf("window(left = %d)", m.Left))
		case ir.MaskExpr:
			e := ir.ExprString(m.Expr)
			if _, bin := m.Expr.(*ir.Binary); bin {
				e = e[1 : len(e)-1] // its parentheses are expr's own
			}
			out = append(out, "expr("+e+")")
		default:
			out = append(out, m.Kind.String())
		}
	}
	return out
}

// ParamDecls lists v's params as the spec declares them, e.g.
// "doc i32[batch, max_len]": the kernels take each as a buffer argument
// of that name, and each named dim other than qo_heads, kv_heads and
// batch as an i32 argument.
func ParamDecls(v *ir.Variant) []string {
	var out []string
	for _, p := range v.Params {
		dims := make([]string, len(p.Dims))
		for k, d := range p.Dims {
			if d.Name != "" {
				dims[k] = d.Name
			} else {
				dims[k] = strconv.Itoa(d.Size)
			}
		}
		out = append(out, p.Name+" "+p.T.String()+"["+strings.Join(dims, ", ")+"]")
	}
	return out
}

// BuildLSEBase is the manifest's top-level lse_base for a build of vs: the
// variants' common base, "e" for no variants, or "mixed".
func BuildLSEBase(vs []*ir.Variant) string {
	base := ir.LSEBaseE.String()
	for i, v := range vs {
		switch b := v.LSEBase.String(); {
		case i == 0:
			base = b
		case b != base:
			return "mixed"
		}
	}
	return base
}

// VariantEntry builds the variant part of the manifest from its module:
// its constraints, the Defs its plans and kernels use (their integer
// literals read as floats where they convert to one, as the score
// constraint writes them: literalFloats), and the status table.
func VariantEntry(v *ir.Variant, m *ir.Module) VariantManifest {
	rules := map[string]string{"reclaim": reclaimText(v)}
	for _, d := range m.Defs {
		rules["def "+d.Name] = ir.ExprString(literalFloats(d.Body))
	}
	return VariantManifest{Name: v.Name, LSEBase: v.LSEBase.String(), Constraints: Constraints(v), Rules: rules, Errors: m.Errors, Reclaim: ReclaimRuleOf(v)}
}

// explainPlan prints an entry's plan, indented under the kernel.
func explainPlan(sb *strings.Builder, p *PlanManifest) {
	const in = "       "
	for _, c := range p.Checks {
		fmt.Fprintf(sb, "%scheck: %s -> %d\n", in, c.Fail, c.Code)
	}
	if p.Validate {
		fmt.Fprintf(sb, "%svalidates every table it reads before any work\n", in)
	}
	for _, s := range p.Seq {
		host := ""
		if s.Host != "" {
			host = " (the launcher uses " + s.Host + ")"
		}
		fmt.Fprintf(sb, "%s%s = %s over sequences of %s%s\n", in, s.Name, s.Op, s.Of, host)
	}
	if p.Skip != "" {
		fmt.Fprintf(sb, "%snothing to do when %s\n", in, p.Skip)
	}
	if h := p.Handoff; h != nil {
		fmt.Fprintf(sb, "%shands over to %s when %s\n", in, h.Role, h.When)
	}
	for _, c := range p.Limits {
		fmt.Fprintf(sb, "%slimit: %s -> %d\n", in, c.Fail, c.Code)
	}
	launch := func(prefix string, l LaunchManifest) {
		fmt.Fprintf(sb, "%s%srun %s over %s items", in, prefix, l.Kernel, l.Items)
		if len(l.Bind) > 0 {
			var bs []string
			for _, name := range slices.Sorted(maps.Keys(l.Bind)) {
				v := "NULL"
				if x := l.Bind[name]; x != nil {
					v = *x
				}
				bs = append(bs, name+" = "+v)
			}
			fmt.Fprintf(sb, " with %s", strings.Join(bs, ", "))
		}
		if l.Grid != "" {
			fmt.Fprintf(sb, "; grid %s, block %d, dynamic shared memory %d bytes", l.Grid, l.Block, l.Smem)
		}
		sb.WriteString("\n")
	}
	if s := p.Split; s != nil {
		fmt.Fprintf(sb, "%ssplits = %s with threads = %s; when splits <= 1:\n", in, s.Splits, p.Threads)
		for _, l := range p.Direct {
			launch("  ", l)
		}
		fmt.Fprintf(sb, "%sotherwise, with scratch", in)
		for _, sc := range s.Scratch {
			fmt.Fprintf(sb, " %s %s[%s]", sc.Name, sc.DType, sc.Size)
		}
		sb.WriteString(":\n")
		for _, l := range s.Launches {
			launch("  ", l)
		}
		return
	}
	for _, l := range p.Direct {
		launch("", l)
	}
}

// Marshal renders the manifest deterministically (sorted map keys, stable
// kernel order) with a trailing newline.
func (m *Manifest) Marshal() ([]byte, error) {
	sort.SliceStable(m.Kernels, func(i, j int) bool {
		a, b := m.Kernels[i], m.Kernels[j]
		if a.Variant != b.Variant {
			return a.Variant < b.Variant
		}
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		return a.Symbol < b.Symbol
	})
	sort.SliceStable(m.Variants, func(i, j int) bool { return m.Variants[i].Name < m.Variants[j].Name })
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Explain renders a manifest's variant for a person.
func Explain(vm VariantManifest, ks []KernelManifest) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "variant %s\n", vm.Name)
	var keys []string
	for k := range vm.Constraints {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := vm.Constraints[k]
		switch ps := val.(type) { // params, as the spec declares them
		case []string:
			val = strings.Join(ps, ", ")
		case []any:
			val = strings.Trim(fmt.Sprint(ps...), "[]")
		}
		fmt.Fprintf(&sb, "  %-12s %v\n", k, val)
	}
	sb.WriteString("kernels:\n")
	for _, k := range ks {
		if k.Variant != vm.Name {
			continue
		}
		entry := ""
		if k.Entry {
			entry = " (entry)"
		}
		var args []string
		for _, a := range k.Args {
			args = append(args, a.Name)
		}
		fmt.Fprintf(&sb, "  %-4s %-12s %s%s\n       (%s)\n", k.Target, k.Role, k.Symbol, entry, strings.Join(args, ", "))
		if l := k.Launch; l != nil {
			fmt.Fprintf(&sb, "       launch: block %d, dynamic shared memory %d bytes\n", l.Block, l.Smem)
		}
		if p := k.Plan; p != nil {
			explainPlan(&sb, p)
		}
	}
	sb.WriteString("dispatch rules:\n")
	keys = keys[:0]
	for k := range vm.Rules {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&sb, "  %s: %s\n", k, vm.Rules[k])
	}
	return sb.String()
}
