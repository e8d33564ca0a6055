package bench

import (
	"errors"
	"fmt"
	"strings"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/ir"
)

// Heads is the attention shape of the built-in cases.
type Heads struct {
	QOHeads, KVHeads, HeadDim, PageSize int
}

// DefaultHeads is issue 10's shape: Llama 3 8B's 32 query heads over 8 KV
// heads, head_dim 128, 16-token pages.
var DefaultHeads = Heads{QOHeads: 32, KVHeads: 8, HeadDim: 128, PageSize: 16}

// Builtin is one built-in case: a role over a cache of one storage type.
type Builtin struct {
	Role  ir.Role
	DType string // q, o and (without KVDType) K/V storage: f32, f16, bf16
	// KVDType is an 8-bit K/V storage type (issue 9: e4m3, e5m2, i8, the
	// spec's kv_dtype, per-tensor scales) with DType for q and o; empty:
	// K/V are stored as DType. A name the spec language does not know is
	// reported as skipped with the spec error.
	KVDType string
	// Mask is the spec's mask line (default "causal").
	Mask string
}

// Name is the case's name in the table: role and storage, e.g.
// "decode f16" or "decode f16/e4m3".
func (b Builtin) Name() string {
	n := string(b.Role) + " " + b.DType
	if b.KVDType != "" {
		n += "/" + b.KVDType
	}
	if b.Mask != "" && b.Mask != "causal" {
		n += " " + b.Mask
	}
	return n
}

// DefaultBuiltins are issue 10's cases, decode for f32, f16 and bf16 and
// causal prefill for f32 and bf16, and issue 9's decode of f16 queries
// over e4m3 and i8 caches.
func DefaultBuiltins() []Builtin {
	return []Builtin{
		{Role: ir.RoleDecode, DType: "f32"},
		{Role: ir.RoleDecode, DType: "f16"},
		{Role: ir.RoleDecode, DType: "bf16"},
		{Role: ir.RoleDecode, DType: "f16", KVDType: "e4m3"},
		{Role: ir.RoleDecode, DType: "f16", KVDType: "i8"},
		{Role: ir.RolePrefill, DType: "f32"},
		{Role: ir.RolePrefill, DType: "bf16"},
	}
}

// ParseStorage reads a --decode/--prefill item: "f16", or "f16/e4m3" for
// f16 queries over an 8-bit cache.
func ParseStorage(role ir.Role, s string) (Builtin, error) {
	dt, kv, _ := strings.Cut(strings.TrimSpace(s), "/")
	b := Builtin{Role: role, DType: dt, KVDType: kv}
	switch dt {
	case "f32", "f16", "bf16":
	default:
		return b, fmt.Errorf("unknown dtype %q in %q (f32, f16 or bf16, optionally /<8-bit kv dtype>)", dt, s)
	}
	if strings.Contains(s, "/") && kv == "" {
		return b, fmt.Errorf("empty kv dtype in %q", s)
	}
	return b, nil
}

// specKey groups built-ins that one variant serves.
func (b Builtin) specKey() string { return b.DType + "/" + b.KVDType + "/" + b.Mask }

// BuiltinSpec is the spec text of the variant that serves cases bs (all
// with the same storage and mask) in shape h.
func BuiltinSpec(name string, h Heads, bs []Builtin) string {
	b := bs[0]
	cache := fmt.Sprintf("paged(page_size = %d)", h.PageSize)
	if b.KVDType != "" {
		cache = fmt.Sprintf("paged(page_size = %d, kv_dtype = %s)", h.PageSize, b.KVDType)
	}
	mask := b.Mask
	if mask == "" {
		mask = "causal"
	}
	var roles []string
	seen := map[ir.Role]bool{}
	for _, x := range bs {
		if !seen[x.Role] {
			seen[x.Role] = true
			roles = append(roles, string(x.Role))
		}
	}
	return fmt.Sprintf(`variant %s {
  heads    qo = %d, kv = %d
  head_dim %d
  dtype    %s
  cache    %s
  mask     %s
  kernels  %s
}
`, name, h.QOHeads, h.KVHeads, h.HeadDim, b.DType, cache, mask, strings.Join(roles, ", "))
}

// Plan is what a CPU bench builds and measures: variants, and the cases
// on them in the order they run.
type Plan struct {
	Variants []PlannedVariant
	Cases    []PlannedCase
}

// PlannedVariant is a variant to build, or why it cannot be (a built-in
// spec the language does not accept yet, a variant that generates no
// kernels yet): Err, with Variant nil or unsupported.
type PlannedVariant struct {
	Variant *ir.Variant
	Err     error
}

// PlannedCase is one measurement: a role of Plan.Variants[Variant].
type PlannedCase struct {
	Variant int
	Role    ir.Role
	Name    string
}

// BuiltinPlan builds one variant per storage type and mask for the
// built-in cases bs in shape h; the cases run decode first, each role in
// the order of bs.
func BuiltinPlan(h Heads, bs []Builtin) *Plan {
	p := &Plan{}
	index := map[string]int{}
	var groups [][]Builtin
	for _, b := range bs {
		k := b.specKey()
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], b)
	}
	for i, g := range groups {
		name := "bench_" + g[0].DType
		if g[0].KVDType != "" {
			name += "_" + g[0].KVDType
		}
		if g[0].Mask != "" && g[0].Mask != "causal" {
			name += fmt.Sprintf("_mask%d", i)
		}
		pv := PlannedVariant{}
		vs, err := frontend.Parse("<bench "+g[0].Name()+">", []byte(BuiltinSpec(name, h, g)))
		switch {
		case err != nil:
			pv.Err = err
		case len(vs) != 1:
			pv.Err = fmt.Errorf("built-in spec gave %d variants", len(vs))
		default:
			pv.Variant = vs[0]
		}
		p.Variants = append(p.Variants, pv)
	}
	for _, role := range []ir.Role{ir.RoleDecode, ir.RolePrefill} {
		for _, b := range bs {
			if b.Role == role {
				p.Cases = append(p.Cases, PlannedCase{Variant: index[b.specKey()], Role: role, Name: b.Name()})
			}
		}
	}
	return p
}

// SpecPlan measures the decode and prefill of every variant (those it
// lists), decode cases first.
func SpecPlan(vs []*ir.Variant) *Plan {
	p := &Plan{}
	for _, v := range vs {
		p.Variants = append(p.Variants, PlannedVariant{Variant: v})
	}
	for _, role := range []ir.Role{ir.RoleDecode, ir.RolePrefill} {
		for i, v := range vs {
			if v.HasRole(role) {
				p.Cases = append(p.Cases, PlannedCase{Variant: i, Role: role, Name: v.Name + " " + string(role)})
			}
		}
	}
	return p
}

// CheckHeads checks the built-in cases' shape h with the spec language's
// own rules — the checker's errors on the heads, head_dim and cache lines
// of the spec the cases are built from — and returns every error found,
// without the spec's positions.
func CheckHeads(h Heads) error {
	src := BuiltinSpec("bench_shape", h, []Builtin{{Role: ir.RoleDecode, DType: "f32"}})
	cs, err := frontend.ParseEach("<bench shape>", []byte(src))
	if err != nil {
		return err
	}
	var msgs []string
	for _, c := range cs {
		for _, e := range c.Errs {
			msgs = append(msgs, e.Msg)
		}
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}
