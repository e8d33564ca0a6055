package frontend

import (
	"bufio"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attnc/attnc/ir"
)

// exampleFiles are the seven DESIGN.md §3 examples in source order, then extras.
var exampleFiles = []string{
	"llama3_8b", "mistral_7b", "llama2_streaming", "gemma2_local", "chunked_alibi", "eagle_tree", "deepseek_v3_mla", "mha_softcap",
}

func examplePath(name string) string { return filepath.Join("..", "examples", name+".attn") }

// defaultKernels is the kernel list a variant at p gets without a kernels line.
func defaultKernels(p ir.Pos) []ir.KernelRef {
	return []ir.KernelRef{{Role: ir.RolePrefill, Pos: p}, {Role: ir.RoleDecode, Pos: p}, {Role: ir.RoleMergeState, Pos: p}}
}

var (
	qPos  = ir.R("q_pos", ir.I32)
	kvPos = ir.R("kv_pos", ir.I32)
	score = ir.R("score", ir.F32)
)

// chunkedMask is `kv_pos <= q_pos && q_pos / 1024 == kv_pos / 1024`.
var chunkedMask = ir.Bin(ir.And,
	ir.Bin(ir.Le, kvPos, qPos),
	ir.Bin(ir.Eq, ir.Bin(ir.Div, qPos, ir.Int(1024)), ir.Bin(ir.Div, kvPos, ir.Int(1024))))

// want builds, by hand from DESIGN.md §3, the variant each example must give.
func want(name string) *ir.Variant {
	f := examplePath(name)
	at := func(line, col int) ir.Pos { return ir.Pos{File: f, Line: line, Col: col} }
	switch name {
	case "llama3_8b":
		return &ir.Variant{
			Name: "llama3_8b", Pos: at(2, 1),
			QOHeads: 32, KVHeads: 8, HeadDimQK: 128, HeadDimV: 128,
			DType: ir.DTF16, PageSize: 16, Layout: ir.HND, Table: ir.CSR,
			Masks: []ir.MaskClause{{Kind: ir.MaskCausal, Pos: at(7, 12)}},
			Scale: 1 / math.Sqrt(128),
			Kernels: []ir.KernelRef{
				{Role: ir.RolePrefill, Pos: at(8, 12)}, {Role: ir.RoleDecode, Pos: at(8, 21)}, {Role: ir.RoleMergeState, Pos: at(8, 29)},
			},
			CachePos: at(6, 3), HeadsPos: at(3, 3),
		}
	case "mistral_7b":
		return &ir.Variant{
			Name: "mistral_7b", Pos: at(1, 1),
			QOHeads: 32, KVHeads: 8, HeadDimQK: 128, HeadDimV: 128,
			DType: ir.DTBF16, PageSize: 32, Layout: ir.NHD, Table: ir.BlockTable,
			// window(size = 4096) is HF/vLLM's sliding_window: 4095 to the left plus self.
			Masks:    []ir.MaskClause{{Kind: ir.MaskWindow, Left: 4095, Pos: at(6, 8)}},
			Scale:    1 / math.Sqrt(128),
			Kernels:  defaultKernels(at(1, 1)),
			CachePos: at(5, 3), HeadsPos: at(2, 3),
		}
	case "llama2_streaming":
		return &ir.Variant{
			Name: "llama2_streaming", Pos: at(1, 1),
			QOHeads: 32, KVHeads: 32, HeadDimQK: 128, HeadDimV: 128,
			DType: ir.DTF16, PageSize: 16, Layout: ir.HND, Table: ir.CSR,
			Masks:    []ir.MaskClause{{Kind: ir.MaskWindow, Left: 1019, Pos: at(6, 8)}},
			Sinks:    &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4, Pos: at(7, 3)},
			Scale:    1 / math.Sqrt(128),
			Kernels:  defaultKernels(at(1, 1)),
			CachePos: at(5, 3), HeadsPos: at(2, 3),
		}
	case "gemma2_local":
		return &ir.Variant{
			Name: "gemma2_local", Pos: at(1, 1),
			QOHeads: 16, KVHeads: 8, HeadDimQK: 256, HeadDimV: 256,
			DType: ir.DTBF16, PageSize: 16, Layout: ir.HND, Table: ir.CSR,
			Masks:    []ir.MaskClause{{Kind: ir.MaskWindow, Left: 4095, Pos: at(6, 8)}}, // size = 4096
			Score:    &ir.Call{Fn: "softcap", Args: []ir.Expr{score, ir.Float(50)}, T: ir.F32},
			ScorePos: at(7, 3),
			Scale:    0.0625, ScaleExplicit: true,
			Kernels:  defaultKernels(at(1, 1)),
			CachePos: at(5, 3), HeadsPos: at(2, 3),
		}
	case "chunked_alibi":
		return &ir.Variant{
			Name: "chunked_alibi", Pos: at(1, 1),
			QOHeads: 8, KVHeads: 8, HeadDimQK: 64, HeadDimV: 64,
			DType: ir.DTF32, PageSize: 64, Layout: ir.HND, Table: ir.CSR,
			Masks: []ir.MaskClause{{Kind: ir.MaskExpr, Expr: chunkedMask, Pos: at(6, 9)}},
			Score: ir.Bin(ir.Sub, score, ir.Bin(ir.Mul,
				&ir.Call{Fn: "alibi_slope", Args: []ir.Expr{ir.R("head", ir.I32), ir.Int(8)}, T: ir.F32},
				&ir.Convert{To: ir.F32, X: ir.Bin(ir.Sub, qPos, kvPos)})),
			ScorePos: at(7, 3),
			Scale:    0.125,
			Kernels:  defaultKernels(at(1, 1)),
			CachePos: at(5, 3), HeadsPos: at(2, 3),
		}
	case "eagle_tree":
		return &ir.Variant{
			Name: "eagle_tree", Pos: at(1, 1),
			QOHeads: 32, KVHeads: 8, HeadDimQK: 128, HeadDimV: 128,
			DType: ir.DTF16, PageSize: 16, Layout: ir.HND, Table: ir.CSR,
			Masks: []ir.MaskClause{{Kind: ir.MaskTree, Pos: at(6, 8)}},
			Scale: 1 / math.Sqrt(128),
			Rope: &ir.Rope{Theta: 500000, Style: ir.RopeLlama3, Pos: at(7, 3), Params: map[string]float64{
				"theta": 500000, "factor": 8, "low_freq": 1, "high_freq": 4, "original_max": 8192,
			}},
			Kernels:  defaultKernels(at(1, 1)),
			CachePos: at(5, 3), HeadsPos: at(2, 3),
		}
	case "deepseek_v3_mla":
		return &ir.Variant{
			Name: "deepseek_v3_mla", Pos: at(1, 1),
			QOHeads: 128, KVHeads: 1, HeadDimQK: 576, HeadDimV: 512,
			DType: ir.DTBF16, PageSize: 64, Layout: ir.HND, Table: ir.CSR,
			Masks: []ir.MaskClause{{Kind: ir.MaskCausal, Pos: at(5, 8)}},
			// DeepSeek-V3: 192^-0.5 * mscale^2, mscale = 0.1 * ln(40) + 1.
			Scale: 0.1352337788, ScaleExplicit: true,
			MLA:      &ir.MLA{Heads: 128, KVLoraRank: 512, RopeDim: 64, Pos: at(2, 3)},
			Kernels:  defaultKernels(at(1, 1)),
			CachePos: at(4, 3), HeadsPos: at(2, 3),
		}
	case "mha_softcap":
		return &ir.Variant{
			Name: "mha_softcap", Pos: at(2, 1),
			QOHeads: 8, KVHeads: 8, HeadDimQK: 64, HeadDimV: 64,
			DType: ir.DTF32, PageSize: 16, Layout: ir.NHD, Table: ir.CSR,
			Masks:    []ir.MaskClause{{Kind: ir.MaskCausal, Pos: at(7, 8)}},
			Score:    &ir.Call{Fn: "softcap", Args: []ir.Expr{score, ir.Float(30)}, T: ir.F32},
			ScorePos: at(8, 3),
			Scale:    0.125,
			Kernels:  defaultKernels(at(2, 1)),
			CachePos: at(6, 3), HeadsPos: at(3, 3),
		}
	}
	return nil
}

func TestExamples(t *testing.T) {
	for _, name := range exampleFiles {
		t.Run(name, func(t *testing.T) {
			vs, err := ParseFile(examplePath(name))
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) != 1 {
				t.Fatalf("got %d variants, want 1", len(vs))
			}
			exp := want(name)
			exp.KVDType = exp.DType // an unquantized cache stores dtype values
			got, w := reflect.ValueOf(*vs[0]), reflect.ValueOf(*exp)
			for i := 0; i < got.NumField(); i++ {
				if g, e := got.Field(i).Interface(), w.Field(i).Interface(); !reflect.DeepEqual(g, e) {
					t.Errorf("%s:\n got  %#v\n want %#v", got.Type().Field(i).Name, g, e)
				}
			}
		})
	}
}

// TestAllInOneFile parses the DESIGN examples as one file, as DESIGN.md shows them.
func TestAllInOneFile(t *testing.T) {
	var src []byte
	for _, name := range exampleFiles {
		b, err := os.ReadFile(examplePath(name))
		if err != nil {
			t.Fatal(err)
		}
		src = append(append(src, b...), '\n')
	}
	vs, err := Parse("all.attn", src)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	if !reflect.DeepEqual(names, exampleFiles) {
		t.Errorf("variants %v, want %v", names, exampleFiles)
	}
}

func TestChunkedMaskPrints(t *testing.T) {
	vs, err := ParseFile(examplePath("chunked_alibi"))
	if err != nil {
		t.Fatal(err)
	}
	const want = "((kv_pos <= q_pos) & ((q_pos / 1024) == (kv_pos / 1024)))"
	if got := ir.ExprString(vs[0].Masks[0].Expr); got != want {
		t.Errorf("mask prints as %s, want %s", got, want)
	}
}

// TestDefaults checks what a minimal spec gets.
func TestDefaults(t *testing.T) {
	vs, err := Parse("d.attn", []byte("variant m {\n  heads qo = 4\n  head_dim qk = 192, v = 128\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := vs[0]
	p := ir.Pos{File: "d.attn", Line: 1, Col: 1}
	if v.QOHeads != 4 || v.KVHeads != 4 || v.HeadDimQK != 192 || v.HeadDimV != 128 || v.DType != ir.DTF16 ||
		v.PageSize != 16 || v.Layout != ir.HND || v.Table != ir.CSR || v.ScaleExplicit || v.Scale != 1/math.Sqrt(192) ||
		v.Score != nil || v.Sinks != nil || v.Rope != nil || v.MLA != nil || v.CachePos != p {
		t.Errorf("defaults: %+v", v)
	}
	if !reflect.DeepEqual(v.Masks, []ir.MaskClause{{Kind: ir.MaskCausal, Pos: p}}) || !reflect.DeepEqual(v.Kernels, defaultKernels(p)) {
		t.Errorf("default masks %v, kernels %v", v.Masks, v.Kernels)
	}
}

// TestExprs checks expression typing against hand-built trees.
func TestExprs(t *testing.T) {
	head, batch := ir.R("head", ir.I32), ir.R("batch", ir.I32)
	f32 := func(x ir.Expr) ir.Expr { return &ir.Convert{To: ir.F32, X: x} }
	cases := []struct {
		mask, score string
		want        ir.Expr
	}{
		{mask: "q_pos - kv_pos <= 3 || !(head == 2)", want: ir.Bin(ir.Or,
			ir.Bin(ir.Le, ir.Bin(ir.Sub, qPos, kvPos), ir.Int(3)), ir.Un(ir.Not, ir.Bin(ir.Eq, head, ir.Int(2))))},
		{mask: "1 + 2 * 3 % 4 > -batch", want: ir.Bin(ir.Gt,
			ir.Bin(ir.Add, ir.Int(1), ir.Bin(ir.Rem, ir.Bin(ir.Mul, ir.Int(2), ir.Int(3)), ir.Int(4))), ir.Un(ir.Neg, batch))},
		{mask: "min(q_pos, kv_pos) != max(abs(head), -1) && (q_pos < 2) == (kv_pos >= 1)", want: ir.Bin(ir.And,
			ir.Bin(ir.Ne, ir.Bin(ir.Min, qPos, kvPos), ir.Bin(ir.Max, ir.Un(ir.Abs, head), ir.Int(-1))),
			ir.Bin(ir.Eq, ir.Bin(ir.Lt, qPos, ir.Int(2)), ir.Bin(ir.Ge, kvPos, ir.Int(1))))},
		{mask: "(q_pos > -2147483648) != (- -1 < --(2))", want: ir.Bin(ir.Ne,
			ir.Bin(ir.Gt, qPos, ir.Int(-2147483648)), ir.Bin(ir.Lt, ir.Int(1), ir.Int(2)))},
		{mask: "q_pos * 0.5 < kv_pos", want: ir.Bin(ir.Lt, ir.Bin(ir.Mul, f32(qPos), ir.Float(0.5)), f32(kvPos))},
		{score: "score", want: nil},
		{score: "q_pos", want: f32(qPos)},
		{score: "-1e-3 * tanh(score) + exp(1) - log(kv_pos) / sqrt(2.5)", want: ir.Bin(ir.Sub,
			ir.Bin(ir.Add, ir.Bin(ir.Mul, ir.Float(-1e-3), ir.Un(ir.Tanh, score)), ir.Un(ir.Exp, f32(ir.Int(1)))),
			ir.Bin(ir.Div, ir.Un(ir.Log, f32(kvPos)), ir.Un(ir.Sqrt, ir.Float(2.5))))},
		{score: "softcap(score, 30) * alibi_slope(head % 2)", want: ir.Bin(ir.Mul,
			&ir.Call{Fn: "softcap", Args: []ir.Expr{score, f32(ir.Int(30))}, T: ir.F32},
			&ir.Call{Fn: "alibi_slope", Args: []ir.Expr{ir.Bin(ir.Rem, head, ir.Int(2)), ir.Int(6)}, T: ir.F32})},
		{score: "max(score,\n    0.0)", want: ir.Bin(ir.Max, score, ir.Float(0))},
	}
	for _, c := range cases {
		src := "variant e {\n  heads qo = 6, kv = 2\n  head_dim 64\n"
		if c.mask != "" {
			src += "  mask expr(" + c.mask + ")\n"
		} else {
			src += "  score " + c.score + "\n"
		}
		vs, err := Parse("e.attn", []byte(src+"}\n"))
		if err != nil {
			t.Errorf("%s%s: %v", c.mask, c.score, err)
			continue
		}
		got := vs[0].Score
		if c.mask != "" {
			got = vs[0].Masks[0].Expr
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s%s:\n got  %#v\n want %#v", c.mask, c.score, got, c.want)
		}
	}
}

// errorCase is one case of testdata/errors.txt.
type errorCase struct {
	name, src, want string
	line            int
}

// readErrorCases reads testdata/errors.txt: each case is a line "== name",
// the spec, and a line "-> expected error" for the spec parsed as e.attn.
func readErrorCases(t testing.TB) []errorCase {
	f, err := os.Open(filepath.Join("testdata", "errors.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []errorCase
	var cur *errorCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "== "):
			cases = append(cases, errorCase{name: line[3:], line: n})
			cur = &cases[len(cases)-1]
		case cur == nil:
		case strings.HasPrefix(line, "-> "):
			cur.want = line[3:]
			cur = nil
		default:
			cur.src += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestErrors(t *testing.T) {
	cases := readErrorCases(t)
	if len(cases) < 40 {
		t.Fatalf("only %d error cases", len(cases))
	}
	for _, c := range cases {
		_, err := Parse("e.attn", []byte(c.src))
		var pe *ir.PosError
		switch {
		case err == nil:
			t.Errorf("errors.txt:%d %s: no error, want %s", c.line, c.name, c.want)
		case !errors.As(err, &pe):
			t.Errorf("errors.txt:%d %s: error %T is not *ir.PosError", c.line, c.name, err)
		case err.Error() != c.want:
			t.Errorf("errors.txt:%d %s:\n got  %s\n want %s", c.line, c.name, err, c.want)
		}
	}
}

func TestParseFileMissing(t *testing.T) {
	if _, err := ParseFile(filepath.Join(t.TempDir(), "none.attn")); err == nil {
		t.Error("no error for a missing file")
	}
}

// TestSettings covers settings the examples do not use.
func TestSettings(t *testing.T) {
	src := `variant s {
  heads qo = 4,
        kv = 2
  head_dim qk = 64, v = 32
  mask tree, window(left = 64), none, custom, causal
  sinks learned
  rope inline(style = yarn, factor = 4, original_max = 4096, beta_fast = 16)
  kernels decode, append, copy_page
}
`
	vs, err := Parse("s.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	v := vs[0]
	at := func(line, col int) ir.Pos { return ir.Pos{File: "s.attn", Line: line, Col: col} }
	wantMasks := []ir.MaskClause{
		{Kind: ir.MaskTree, Pos: at(5, 8)}, {Kind: ir.MaskWindow, Left: 64, Pos: at(5, 14)},
		{Kind: ir.MaskNone, Pos: at(5, 33)}, {Kind: ir.MaskCustom, Pos: at(5, 39)}, {Kind: ir.MaskCausal, Pos: at(5, 47)},
	}
	if !reflect.DeepEqual(v.Masks, wantMasks) {
		t.Errorf("masks %+v, want %+v", v.Masks, wantMasks)
	}
	if v.QOHeads != 4 || v.KVHeads != 2 || v.HeadDimQK != 64 || v.HeadDimV != 32 {
		t.Errorf("shape %d/%d %d/%d", v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV)
	}
	if want := (&ir.Sinks{Kind: ir.SinkLearned, Pos: at(6, 3)}); !reflect.DeepEqual(v.Sinks, want) {
		t.Errorf("sinks %+v", v.Sinks)
	}
	wantRope := &ir.Rope{Theta: 10000, Style: ir.RopeYarn, Pos: at(7, 3), Params: map[string]float64{
		"theta": 10000, "factor": 4, "original_max": 4096, "beta_fast": 16, "beta_slow": 1,
	}}
	if !reflect.DeepEqual(v.Rope, wantRope) {
		t.Errorf("rope %+v, want %+v", v.Rope, wantRope)
	}
	wantKernels := []ir.KernelRef{{Role: ir.RoleDecode, Pos: at(8, 11)}, {Role: ir.RoleAppend, Pos: at(8, 19)}, {Role: ir.RoleCopyPage, Pos: at(8, 27)}}
	if !reflect.DeepEqual(v.Kernels, wantKernels) {
		t.Errorf("kernels %+v", v.Kernels)
	}
}

// TestPortSettings covers the settings that name a peer's convention:
// window(size = S) is HF/vLLM's sliding_window (left = S - 1), lse base 2 is
// FlashInfer/TVM's, and RoPE's pairs, rotary_dim and YaRN truncate.
func TestPortSettings(t *testing.T) {
	src := `variant p {
  heads qo = 8, kv = 2
  head_dim 128
  mask window(size = 4096)
  lse base = 2
  rope inline(theta = 150000, style = yarn, factor = 32, original_max = 4096, truncate = false, pairs = interleaved, rotary_dim = 64, mscale_all_dim = 0)
}
variant q {
  heads qo = 8
  head_dim 64
  mask window(left = 0)
  lse base = e
}
`
	vs, err := Parse("p.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p, q := vs[0], vs[1]
	// HF's sliding_window counts the query itself: 4096 tokens = self + 4095 to the left.
	if len(p.Masks) != 1 || p.Masks[0].Kind != ir.MaskWindow || p.Masks[0].Left != 4095 {
		t.Errorf("window(size = 4096): %+v, want left 4095", p.Masks)
	}
	if q.Masks[0].Left != 0 {
		t.Errorf("window(left = 0): %+v", q.Masks)
	}
	if p.LSEBase != ir.LSEBase2 || q.LSEBase != ir.LSEBaseE {
		t.Errorf("lse bases %v, %v; want 2, e", p.LSEBase, q.LSEBase)
	}
	r := p.Rope
	if r.Pairs != ir.RopeInterleaved || r.RotaryDim != 64 || !r.Untruncated || r.Params["mscale_all_dim"] != 0 {
		t.Errorf("rope %+v", r)
	}
	// Defaults: rotate_half over all of head_dim qk (RotaryDim 0), truncated YaRN range, base e.
	vs, err = Parse("d.attn", []byte("variant d {\n heads qo = 2\n head_dim 32\n rope inline(style = yarn, factor = 2, original_max = 64)\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := vs[0]; d.Rope.Pairs != ir.RopeHalf || d.Rope.RotaryDim != 0 || d.Rope.Dim(32) != 32 || d.Rope.Untruncated || d.LSEBase != ir.LSEBaseE {
		t.Errorf("defaults: rope %+v, lse base %v", d.Rope, d.LSEBase)
	}
}

// TestEmptyFile: a spec without a variant builds nothing, so it is an
// error at its start, not an empty manifest.
func TestEmptyFile(t *testing.T) {
	for _, src := range []string{"", "// nothing here\n\n", "\n\n\n"} {
		vs, err := Parse("empty.attn", []byte(src))
		want := "empty.attn:1:1: the spec has no variant (write variant NAME { ... }; see the examples directory)"
		if vs != nil || err == nil || err.Error() != want {
			t.Errorf("%q: got %v, %v; want the error %s", src, vs, err, want)
		}
	}
}

func TestTooLarge(t *testing.T) {
	src := make([]byte, maxSize+1)
	for i := range src {
		src[i] = '\n'
	}
	_, err := Parse("big.attn", src)
	if want := "big.attn:1:1: spec is too large (262145 bytes; the limit is 262144)"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// TestDesignExamplesMatchFiles: each variant DESIGN.md §3 shows is, line for
// line (indentation aside), the file of the same name under examples/, so
// the documented spelling (window(size = ...), the MLA scale) is the one
// the tests build.
func TestDesignExamplesMatchFiles(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var block []string
	found := 0
	for _, line := range strings.Split(string(doc), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(line, "    variant ") {
			name = strings.Fields(trimmed)[1]
			block = nil
		}
		if name == "" {
			continue
		}
		block = append(block, trimmed)
		if trimmed != "}" {
			continue
		}
		found++
		src, err := os.ReadFile(examplePath(name))
		if err != nil {
			t.Errorf("DESIGN.md shows variant %s but examples/%s.attn: %v", name, name, err)
			name = ""
			continue
		}
		var file []string
		for _, l := range strings.Split(string(src), "\n") {
			if l = strings.TrimSpace(l); l != "" && (len(file) > 0 || strings.HasPrefix(l, "variant ")) {
				file = append(file, l)
			}
		}
		if !reflect.DeepEqual(block, file) {
			t.Errorf("variant %s: DESIGN.md shows\n%s\nexamples/%s.attn has\n%s", name, strings.Join(block, "\n"), name, strings.Join(file, "\n"))
		}
		name = ""
	}
	if found != 7 {
		t.Errorf("found %d variants in DESIGN.md §3, want 7", found)
	}
}

// TestParseFileLimits: a huge file is refused from its size before it is
// read, as "too large" at 1:1, and a device that never ends (/dev/zero) as
// not a regular file; both fast.
func TestParseFileLimits(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.attn")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 << 30); err != nil { // sparse: 3 GB, no disk used
		t.Fatal(err)
	}
	f.Close()
	for path, want := range map[string]string{
		big:         big + ":1:1: spec is too large (3221225472 bytes; the limit is 262144)",
		"/dev/zero": "/dev/zero: not a regular file (a character device); a spec is read from a regular file",
	} {
		if _, err := os.Stat(path); err != nil {
			t.Logf("skip %s: %v", path, err)
			continue
		}
		start := time.Now()
		_, err := ParseFile(path)
		if err == nil || err.Error() != want {
			t.Errorf("%s: got %v, want %s", path, err, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %v", path, d)
		}
	}
}

// TestByteOrderMark: a UTF-8 BOM before the spec is skipped, and columns on
// line 1 count from after it.
func TestByteOrderMark(t *testing.T) {
	src := "\xef\xbb\xbfvariant bom {\n  heads qo = 4\n  head_dim 64\n}\n"
	vs, err := Parse("bom.attn", []byte(src))
	if err != nil || len(vs) != 1 || vs[0].Name != "bom" {
		t.Fatalf("got %v, %v", vs, err)
	}
	if vs[0].Pos.Col != 1 {
		t.Errorf("variant at column %d, want 1", vs[0].Pos.Col)
	}
	_, err = Parse("bom.attn", []byte("\xef\xbb\xbfvariant 9 {}\n"))
	if want := "bom.attn:1:9: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want an error at %s", err, want)
	}
}

// TestKVDType checks the quantized-cache settings: kv_dtype picks the
// 8-bit code, kv_scale defaults to per_tensor, dtype stays q's and o's,
// and kv_dtype equal to dtype is the plain cache.
func TestKVDType(t *testing.T) {
	cases := []struct {
		cache  string
		kv     ir.DType
		scale  ir.KVScale
		scaleN int
	}{
		{"paged(page_size = 16)", ir.DTBF16, ir.KVScaleNone, 1},
		{"paged(kv_dtype = bf16)", ir.DTBF16, ir.KVScaleNone, 1},
		{"paged(kv_dtype = e4m3)", ir.DTE4M3, ir.KVScalePerTensor, 1},
		{"paged(kv_dtype = e5m2, kv_scale = per_tensor)", ir.DTE5M2, ir.KVScalePerTensor, 1},
		{"paged(page_size = 8, kv_dtype = i8, kv_scale = per_head, layout = NHD)", ir.DTI8, ir.KVScalePerHead, 4},
	}
	for _, c := range cases {
		src := "variant q {\n  heads qo = 8, kv = 4\n  head_dim 64\n  dtype bf16\n  cache " + c.cache + "\n}\n"
		vs, err := Parse("q.attn", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", c.cache, err)
		}
		v := vs[0]
		if v.DType != ir.DTBF16 || v.KVDType != c.kv || v.KVScale != c.scale || v.ScaleLen() != c.scaleN || v.Quantized() != (c.scale != ir.KVScaleNone) {
			t.Errorf("%s: dtype %s kv_dtype %s kv_scale %s (%d), want bf16 %s %s (%d)", c.cache, v.DType, v.KVDType, v.KVScale, v.ScaleLen(), c.kv, c.scale, c.scaleN)
		}
	}
}

// TestExamplesIndexed: examples/README.md's table has a row for every spec
// in examples/ (a link to the file in its first cell) and no row for a
// file that is not there, and marks §3 on exactly the seven DESIGN.md §3
// shows (exampleFiles' first seven).
func TestExamplesIndexed(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "examples", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.attn"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	rows := map[string]string{} // file name -> the rest of its row
	for _, line := range strings.Split(string(doc), "\n") {
		link, isRow := strings.CutPrefix(line, "| [")
		name, rest, ok := strings.Cut(link, "](")
		if !isRow || !ok {
			continue
		}
		if _, dup := rows[name]; dup {
			t.Errorf("examples/README.md has two rows for %s", name)
		}
		rows[name] = rest
	}
	for _, f := range files {
		name := filepath.Base(f)
		rest, ok := rows[name]
		if !ok {
			t.Errorf("examples/README.md has no row for %s", name)
			continue
		}
		delete(rows, name)
		design := slices.Contains(exampleFiles[:7], strings.TrimSuffix(name, ".attn"))
		if marked := strings.Contains(rest, "| §3."); marked != design {
			t.Errorf("examples/README.md marks %s with §3: %v, want %v", name, marked, design)
		}
	}
	for name := range rows {
		t.Errorf("examples/README.md has a row for %s, which examples/ does not hold", name)
	}
}
