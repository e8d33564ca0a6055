package registry

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
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
	Launch      map[string]any `json:"launch,omitempty"`
	// StackBytes (CPU) bounds the stack one call needs on the calling
	// thread; large scratch lives on the heap.
	StackBytes int64 `json:"stack_bytes,omitempty"`
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

// Constraints are the fixed shape facts a variant's kernels assume.
func Constraints(v *ir.Variant) map[string]any {
	return map[string]any{
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

// VariantEntry builds the variant part of the manifest from the lowered
// module: its constraints and, in text form, the rules its entries follow.
func VariantEntry(v *ir.Variant, m *ir.Module) VariantManifest {
	rules := map[string]string{
		"prefill":      "every sequence one query token at q[b] (qo_indptr[b] == b) -> decode entry; otherwise (sequence, kv head, query tile) work items",
		"query_tile":   fmt.Sprint(queryTile(v)),
		"kv_tile":      fmt.Sprint(KVTile),
		"decode_split": "splits = plan_splits(items = batch_size * kv_heads * head_tiles, threads, max_tiles = max ceil(kv_len / kv_tile)); splits > 1 -> split-KV decode into f32 scratch, then merge_state of the chunks",
		"head_tile":    fmt.Sprint(lower.HeadTile(v.GroupSize())),
		"reclaim":      reclaimText(v),
	}
	for _, d := range m.Defs {
		rules["def "+d.Name] = ir.ExprString(d.Body)
	}
	return VariantManifest{Name: v.Name, LSEBase: v.LSEBase.String(), Constraints: Constraints(v), Rules: rules, Errors: m.Errors, Reclaim: ReclaimRuleOf(v)}
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
		fmt.Fprintf(&sb, "  %-12s %v\n", k, vm.Constraints[k])
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
