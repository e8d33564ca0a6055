package lower

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// The per-feature goldens: one small variant per feature the lowering
// knows, lowered with one fixed tiling. Each testdata/<feature>.ir holds
// the module's text form after `-- module --` and its plans after
// `-- plans --` (the plans carry the checks and the validation, which the
// module text does not). `go test ./lower -update` rewrites them; review
// the diff.

// goldenTiling is the tiling of every golden unless a case names its own:
// 16-position KV tiles and up to 16 rows, so the text stays short.
var goldenTiling = Tiling{KVTile: 16, Rows: 16, MaxHeads: 8}

// goldenBase is the variant each case starts from: MHA (2 qo heads, 2 kv
// heads), head dim 16, f32, 4-slot pages (HND, CSR), causal, prefill.
func goldenBase(name string) *ir.Variant {
	return &ir.Variant{Name: name, QOHeads: 2, KVHeads: 2, HeadDimQK: 16, HeadDimV: 16,
		DType: ir.DTF32, KVDType: ir.DTF32, PageSize: 4, Layout: ir.HND, Table: ir.CSR, Scale: 0.25,
		Masks: []ir.MaskClause{{Kind: ir.MaskCausal}}, Kernels: roles(ir.RolePrefill)}
}

func roles(rs ...ir.Role) []ir.KernelRef {
	var out []ir.KernelRef
	for _, r := range rs {
		out = append(out, ir.KernelRef{Role: r})
	}
	return out
}

// goldenCase is one feature: the change to goldenBase and, when not the
// default, the tiling.
type goldenCase struct {
	feature string
	edit    func(v *ir.Variant)
	tiling  *Tiling
}

var (
	scoreRef = ir.R("score", ir.F32)
	qPosRef  = ir.R("q_pos", ir.I32)
	kvPosRef = ir.R("kv_pos", ir.I32)
	headRef  = ir.R("head", ir.I32)
)

func goldenCases() []goldenCase {
	padded := Tiling{KVTile: 16, Rows: 16, PadRows: true, MaxHeads: 8}
	stored := Tiling{KVTile: 16, DecodeKVTile: 32, Rows: 16, MaxHeads: 8, DecodeStageStored: true}
	runs := Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, PageRuns: true}
	direct := Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, PageRuns: true, DecodeDirect: true}
	inPlace := Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, PageRuns: true, DecodeDirect: true, RopeInPlace: true}
	relative := Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, PageRuns: true, DecodeDirect: true, RopeInPlace: true, DecodeRopeRelative: true}
	inDot := relative
	inDot.DecodeRopeInDot = true
	return []goldenCase{
		// The skeleton's roles.
		{feature: "mha_causal_prefill", edit: func(v *ir.Variant) {}},
		{feature: "gqa_decode", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.Kernels = 8, 2, roles(ir.RoleDecode)
		}},
		{feature: "gqa_head_tiles", edit: func(v *ir.Variant) {
			// A group of 12 heads over MaxHeads 8: items of 6 heads, 2 per group.
			v.QOHeads, v.KVHeads, v.Kernels = 12, 1, roles(ir.RoleDecode)
		}},
		{feature: "split_kv_decode_merge_state", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.Kernels = 4, 2, roles(ir.RoleDecode, ir.RoleMergeState)
		}},
		// The CPU's split by sequence: plan_splits over batch_size, the
		// split kernel's items chunk-major, a chunk's kv heads one run.
		{feature: "split_by_sequence_decode", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.Kernels = 4, 2, roles(ir.RoleDecode)
		}, tiling: &Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, SplitBySequence: true}},
		// The CPU's one decode work kernel for both launches: o, lse and
		// the partial state each stored under NotNull, the launches
		// binding NULL for the buffers they do not write.
		{feature: "decode_one_kernel", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.Kernels = 4, 2, roles(ir.RoleDecode)
		}, tiling: &Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, SplitBySequence: true, DecodeOneKernel: true}},
		// The CPU's look-ahead into the thread's next item: kv_first
		// records the item's first tile, and the staging loop names the
		// next kv head's (next [kv_lo = kv_first, kvh = (kvh + 1)]).
		{feature: "decode_next_item", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.Kernels = 4, 2, roles(ir.RoleDecode)
		}, tiling: &Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, PageRuns: true, DecodeDirect: true, SplitBySequence: true, DecodeOneKernel: true, DecodeNextItem: true}},
		{feature: "lse_base2", edit: func(v *ir.Variant) {
			v.LSEBase, v.Kernels = ir.LSEBase2, roles(ir.RoleDecode, ir.RoleMergeState)
		}},
		// Masks and score transforms.
		{feature: "mask_none", edit: func(v *ir.Variant) { v.Masks = []ir.MaskClause{{Kind: ir.MaskNone}} }},
		{feature: "sliding_window_sink_tokens", edit: func(v *ir.Variant) {
			v.Masks = []ir.MaskClause{{Kind: ir.MaskWindow, Left: 7}}
			v.Sinks = &ir.Sinks{Kind: ir.SinkTokens, Tokens: 2}
		}},
		{feature: "sliding_window_learned_sinks", edit: func(v *ir.Variant) {
			v.Masks = []ir.MaskClause{{Kind: ir.MaskWindow, Left: 7}}
			v.Sinks = &ir.Sinks{Kind: ir.SinkLearned}
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "mask_expr_chunked", edit: func(v *ir.Variant) {
			chunk := func(p ir.Expr) ir.Expr { return ir.Bin(ir.Div, p, ir.Int(8)) }
			v.Masks = []ir.MaskClause{{Kind: ir.MaskExpr, Expr: ir.Bin(ir.And, ir.Bin(ir.Le, kvPosRef, qPosRef),
				ir.Bin(ir.Eq, chunk(qPosRef), chunk(kvPosRef)))}}
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "tree_mask", edit: func(v *ir.Variant) { v.Masks = []ir.MaskClause{{Kind: ir.MaskTree}} }},
		{feature: "custom_mask", edit: func(v *ir.Variant) { v.Masks = []ir.MaskClause{{Kind: ir.MaskCustom}} }},
		{feature: "softcap", edit: func(v *ir.Variant) {
			v.Score = &ir.Call{Fn: "softcap", Args: []ir.Expr{scoreRef, ir.Float(30)}, T: ir.F32}
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "alibi", edit: func(v *ir.Variant) {
			slope := &ir.Call{Fn: "alibi_slope", Args: []ir.Expr{headRef, ir.Int(int64(v.QOHeads))}, T: ir.F32}
			v.Score = ir.Bin(ir.Sub, scoreRef, ir.Bin(ir.Mul, slope, ir.Cvt(ir.F32, ir.Bin(ir.Sub, qPosRef, kvPosRef))))
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "score_may_hide_log", edit: func(v *ir.Variant) {
			v.Score = ir.Bin(ir.Add, scoreRef, ir.Un(ir.Log, ir.Cvt(ir.F32, kvPosRef)))
			v.Kernels = roles(ir.RoleDecode)
		}},
		// Inline RoPE, one case per style and pairing.
		{feature: "rope_normal", edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeNormal}
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "rope_llama3", edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 500000, Style: ir.RopeLlama3,
				Params: map[string]float64{"factor": 8, "low_freq": 1, "high_freq": 4, "original_max": 8192}}
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "rope_yarn", edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 150000, Style: ir.RopeYarn, Untruncated: true,
				Params: map[string]float64{"factor": 32, "original_max": 4096, "beta_fast": 32, "beta_slow": 1}}
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "rope_interleaved_partial", edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeNormal, Pairs: ir.RopeInterleaved, RotaryDim: 8}
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "rope_tree_mask", edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeNormal}
			v.Masks = []ir.MaskClause{{Kind: ir.MaskTree}}
		}},
		// Shapes: MLA's row segments, different qk and v head dims.
		{feature: "mla_row_segments", edit: func(v *ir.Variant) {
			v.MLA = &ir.MLA{Heads: 4, KVLoraRank: 16, RopeDim: 8}
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 4, 1, 24, 16
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "head_dims_qk32_v16", edit: func(v *ir.Variant) {
			v.HeadDimQK, v.HeadDimV, v.Kernels = 32, 16, roles(ir.RoleDecode)
		}},
		// Storage types and 8-bit caches.
		{feature: "f16_storage", edit: func(v *ir.Variant) {
			v.DType, v.KVDType, v.Kernels = ir.DTF16, ir.DTF16, roles(ir.RoleDecode)
		}},
		{feature: "bf16_storage", edit: func(v *ir.Variant) {
			v.DType, v.KVDType, v.Kernels = ir.DTBF16, ir.DTBF16, roles(ir.RoleDecode)
		}},
		{feature: "kv_e4m3_per_tensor", edit: func(v *ir.Variant) {
			v.DType, v.KVDType, v.KVScale = ir.DTF16, ir.DTE4M3, ir.KVScalePerTensor
			v.Kernels = roles(ir.RoleDecode, ir.RoleAppend)
		}},
		{feature: "kv_i8_per_head", edit: func(v *ir.Variant) {
			v.DType, v.KVDType, v.KVScale = ir.DTBF16, ir.DTI8, ir.KVScalePerHead
			v.Kernels = roles(ir.RoleDecode, ir.RoleAppend)
		}},
		{feature: "mla_kv_e4m3", edit: func(v *ir.Variant) {
			v.MLA = &ir.MLA{Heads: 4, KVLoraRank: 16, RopeDim: 8}
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 4, 1, 24, 16
			v.DType, v.KVDType, v.KVScale = ir.DTBF16, ir.DTE4M3, ir.KVScalePerTensor
			v.Kernels = roles(ir.RoleDecode)
		}},
		// Page tables and page layouts.
		{feature: "block_table", edit: func(v *ir.Variant) { v.Table = ir.BlockTable }},
		{feature: "block_table_decode", edit: func(v *ir.Variant) {
			v.Table, v.Kernels = ir.BlockTable, roles(ir.RoleDecode)
		}},
		{feature: "csr_decode", edit: func(v *ir.Variant) { v.Kernels = roles(ir.RoleDecode) }},
		{feature: "layout_nhd", edit: func(v *ir.Variant) {
			v.Layout, v.Kernels = ir.NHD, roles(ir.RoleDecode, ir.RoleAppend, ir.RoleCopyPage)
		}},
		{feature: "page_size_1", edit: func(v *ir.Variant) { v.PageSize, v.Kernels = 1, roles(ir.RoleDecode) }},
		// The page kernels.
		{feature: "page_kernels", edit: func(v *ir.Variant) {
			v.DType, v.KVDType, v.Kernels = ir.DTF16, ir.DTF16, roles(ir.RoleAppend, ir.RoleCopyPage)
		}},
		{feature: "page_moves_nhd_e4m3", edit: func(v *ir.Variant) {
			v.Layout, v.DType, v.KVDType, v.KVScale = ir.NHD, ir.DTF16, ir.DTE4M3, ir.KVScalePerHead
			v.Kernels = roles(ir.RoleCompactCopy, ir.RoleReadKV, ir.RoleGatherPages, ir.RoleScatterPages)
		}},
		{feature: "mla_page_kernels", edit: func(v *ir.Variant) {
			v.MLA = &ir.MLA{Heads: 4, KVLoraRank: 16, RopeDim: 8}
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 4, 1, 24, 16
			v.DType, v.KVDType, v.KVScale = ir.DTBF16, ir.DTE4M3, ir.KVScalePerTensor
			v.Kernels = roles(ir.RoleAppend, ir.RoleCopyPage, ir.RoleCompactCopy, ir.RoleReadKV, ir.RoleGatherPages, ir.RoleScatterPages)
		}},
		{feature: "qkv_append_norm_rope_e4m3", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 4, 2, 8, 8
			v.DType, v.KVDType, v.KVScale = ir.DTF16, ir.DTE4M3, ir.KVScalePerHead
			v.Rope = &ir.Rope{Theta: 1e6, AtAppend: true, Params: map[string]float64{"theta": 1e6}}
			v.QKNorm = &ir.QKNorm{Eps: 1e-6}
			v.Kernels = roles(ir.RoleQKVAppend, ir.RoleDecode)
		}},
		// rope at_append from a table and from factors: qkv_append takes the
		// angles' source and checks positions against rope_positions;
		// decode takes no RoPE argument.
		{feature: "qkv_append_rope_table", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 4, 2, 8, 8
			v.Rope = &ir.Rope{AtAppend: true, Style: ir.RopeTable, RotaryDim: 4, Pairs: ir.RopeInterleaved}
			v.Kernels = roles(ir.RoleQKVAppend, ir.RoleDecode)
		}},
		{feature: "qkv_append_rope_factors", edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 2, 1, 8, 8
			v.DType, v.KVDType = ir.DTBF16, ir.DTBF16
			v.Rope = &ir.Rope{Theta: 10000, AtAppend: true, Style: ir.RopeFactors, Params: map[string]float64{"theta": 10000, "attn_factor": 1.25}}
			v.QKNorm = &ir.QKNorm{Eps: 1e-6, Offset: 1}
			v.Kernels = roles(ir.RoleQKVAppend, ir.RolePrefill)
		}},
		// Tilings: padded rows (tensor-core shapes), decode staging as stored.
		{feature: "padded_rows", tiling: &padded, edit: func(v *ir.Variant) {
			v.QOHeads, v.KVHeads = 4, 2
		}},
		{feature: "decode_stage_stored", tiling: &stored, edit: func(v *ir.Variant) {
			v.DType, v.KVDType, v.KVScale = ir.DTF16, ir.DTE4M3, ir.KVScalePerHead
			v.Kernels = roles(ir.RoleDecode)
		}},
		// Page runs: 4-slot pages under 16-position tiles (four lookups a
		// tile), a 32-slot page holding the tile (one), NHD rows of a block
		// table, MLA's segments, an 8-bit cache, K/V rows without pages.
		{feature: "page_runs_csr_decode", tiling: &runs, edit: func(v *ir.Variant) { v.Kernels = roles(ir.RoleDecode) }},
		{feature: "page_runs_page_32", tiling: &runs, edit: func(v *ir.Variant) { v.PageSize, v.Kernels = 32, roles(ir.RoleDecode) }},
		{feature: "page_runs_nhd_block_table_rope", tiling: &runs, edit: func(v *ir.Variant) {
			v.Layout, v.Table, v.Kernels = ir.NHD, ir.BlockTable, roles(ir.RoleDecode)
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeNormal}
		}},
		{feature: "page_runs_mla_e4m3", tiling: &runs, edit: func(v *ir.Variant) {
			v.MLA = &ir.MLA{Heads: 4, KVLoraRank: 16, RopeDim: 8}
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 4, 1, 24, 16
			v.DType, v.KVDType, v.KVScale = ir.DTBF16, ir.DTE4M3, ir.KVScalePerTensor
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "page_runs_ragged", tiling: &runs, edit: func(v *ir.Variant) { v.Kernels = roles(ir.RolePrefillRagged) }},
		// Decode rows read in place (row offsets): both K and V; MLA's
		// latent V alone (K has two segments); V alone under inline RoPE.
		{feature: "direct_csr_decode_i8", tiling: &direct, edit: func(v *ir.Variant) {
			v.DType, v.KVDType, v.KVScale = ir.DTF16, ir.DTI8, ir.KVScalePerTensor
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "direct_mla_e4m3", tiling: &direct, edit: func(v *ir.Variant) {
			v.MLA = &ir.MLA{Heads: 4, KVLoraRank: 16, RopeDim: 8}
			v.QOHeads, v.KVHeads, v.HeadDimQK, v.HeadDimV = 4, 1, 24, 16
			v.DType, v.KVDType, v.KVScale = ir.DTBF16, ir.DTE4M3, ir.KVScalePerTensor
			v.Kernels = roles(ir.RoleDecode)
		}},
		{feature: "direct_block_table_rope", tiling: &direct, edit: func(v *ir.Variant) {
			v.Table, v.Kernels = ir.BlockTable, roles(ir.RoleDecode)
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeNormal}
		}},
		// The CPU's staging under inline RoPE: rows copied, then their
		// pairs (interleaved here, 8 of 16 dims) rotated in the tile.
		{feature: "rope_in_place_interleaved_partial", tiling: &inPlace, edit: func(v *ir.Variant) {
			v.HeadDimQK, v.HeadDimV = 16, 16
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeNormal, Pairs: ir.RopeInterleaved, RotaryDim: 8}
		}},
		// The CPU's decode under inline RoPE: queries turned once per
		// tile relative to its first position, K rows by their offset in
		// it from the kernel's table (filled once per call, before the
		// parallel loop); the tree's own keys evaluate theirs.
		{feature: "rope_relative_decode_tree", tiling: &relative, edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeLlama3, Params: map[string]float64{"factor": 8, "low_freq": 1, "high_freq": 4, "original_max": 8192}}
			v.Masks = []ir.MaskClause{{Kind: ir.MaskTree}}
			v.Kernels = roles(ir.RoleDecode)
		}},
		// The same with K's rows read in place and turned as Q·Kᵀ reads
		// them (rot(rope_jc, rope_js, 8)); a tile that holds the tree's
		// own keys is staged and turned as before.
		{feature: "rope_in_dot_decode_tree", tiling: &inDot, edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 10000, Style: ir.RopeLlama3, Params: map[string]float64{"factor": 8, "low_freq": 1, "high_freq": 4, "original_max": 8192}}
			v.Masks = []ir.MaskClause{{Kind: ir.MaskTree}}
			v.Kernels = roles(ir.RoleDecode)
		}},
		// GPT-J's interleaved pairs on part of the head dim, turned in
		// place too (rot(rope_jc, rope_js, 4, interleaved)).
		{feature: "rope_in_dot_decode_interleaved", tiling: &inDot, edit: func(v *ir.Variant) {
			v.Rope = &ir.Rope{Theta: 10000, Pairs: ir.RopeInterleaved, RotaryDim: 8}
			v.Kernels = roles(ir.RoleDecode)
		}},
	}
}

// TestLowerGoldens lowers every feature's variant and compares the module
// and its plans with testdata/<feature>.ir; each module must verify and
// print the same text after ir.Parse.
func TestLowerGoldens(t *testing.T) {
	seen := map[string]bool{}
	cases := append(goldenCases(), goldenCase{feature: "gqa_causal", tiling: &cpuLike})
	for _, c := range cases {
		seen[c.feature+".ir"] = true
		t.Run(c.feature, func(t *testing.T) {
			v, tl := goldenBase(c.feature), goldenTiling
			if c.feature == "gqa_causal" {
				v = testVariant() // the first golden, kept as it was
			} else {
				c.edit(v)
			}
			if c.tiling != nil {
				tl = *c.tiling
			}
			m, err := Lower(v, tl)
			if err != nil {
				t.Fatal(err)
			}
			if err := ir.Verify(m); err != nil {
				t.Fatalf("verify: %v", err)
			}
			text := m.String()
			back, err := ir.Parse(text)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if again := back.String(); again != text {
				t.Fatalf("the module does not round-trip through ir.Parse:\n%s", lineDiff(text, again))
			}
			golden(t, filepath.Join("testdata", c.feature+".ir"), "-- module --\n"+text+"-- plans --\n"+plansText(m))
		})
	}
	// Every golden file belongs to a case: a renamed feature leaves none behind.
	files, _ := filepath.Glob(filepath.Join("testdata", "*.ir"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s belongs to no golden case: remove it", f)
		}
	}
}

// plansText prints a module's plans, one block per plan: the entry, its
// parameters, checks, validation, per-sequence values, limits, skip,
// hand-over and launches (Split's rule, scratch and launches).
func plansText(m *ir.Module) string {
	var sb strings.Builder
	w := func(indent int, format string, args ...any) {
		sb.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&sb, format, args...)
		sb.WriteByte('\n')
	}
	ex := ir.ExprString
	launches := func(indent int, ls []ir.Launch) {
		for _, l := range ls {
			bind := ""
			for _, b := range l.Bind {
				v := "NULL"
				if b.Value != nil {
					v = ex(b.Value)
				}
				bind += fmt.Sprintf(" %s=%s", b.Param, v)
			}
			w(indent, "launch %s items %s%s", l.Kernel, ex(l.Items), bind)
		}
	}
	for _, p := range m.Plans {
		pub := ""
		if p.Public {
			pub = " public"
		}
		w(0, "plan %s entry %s%s", p.Role, p.Entry, pub)
		for _, pr := range p.Params {
			w(1, "param %s", ir.ParamString(pr))
		}
		for _, c := range p.Checks {
			w(1, "check %s return %d", ex(c.Fail), c.Code)
		}
		if p.Validate != nil {
			w(1, "validate {")
			for _, s := range p.Validate.Stmts {
				for _, line := range strings.Split(strings.TrimSuffix(ir.StmtString(s), "\n"), "\n") {
					w(2, "%s", line)
				}
			}
			w(1, "}")
		}
		for _, s := range p.Seq {
			host := ""
			if s.Host != nil {
				host = " host " + ex(s.Host)
			}
			w(1, "seq %s = %s over sequences of %s%s", s.Name, s.Op, ex(s.Of), host)
		}
		for _, c := range p.Limits {
			w(1, "limit %s return %d", ex(c.Fail), c.Code)
		}
		if p.Skip != nil {
			w(1, "skip %s", ex(p.Skip))
		}
		if p.Handoff != nil {
			w(1, "handoff %s when %s", p.Handoff.Role, ex(p.Handoff.When))
		}
		launches(1, p.Direct)
		if s := p.Split; s != nil {
			w(1, "split %s {", ex(s.Splits))
			for _, sc := range s.Scratch {
				w(2, "scratch %s: %s[%s]", sc.Name, sc.T, ex(sc.Size))
			}
			launches(2, s.Launches)
			w(1, "}")
		}
	}
	return sb.String()
}

// lineDiff is a line diff of want and got (LCS): "-" lines only in want,
// "+" lines only in got, with up to 3 lines of context around each change
// and at most 80 changed lines shown.
func lineDiff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-', '+'
		line string
		at   int // line number in want (context and '-') or got ('+'), from 1
	}
	var ops []op
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, op{' ', a[i], i + 1})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', a[i], i + 1})
			i++
		default:
			ops = append(ops, op{'+', b[j], j + 1})
			j++
		}
	}
	const ctx, maxChanged = 3, 80
	show := make([]bool, len(ops))
	for k, o := range ops {
		if o.kind != ' ' {
			for c := max(0, k-ctx); c <= min(len(ops)-1, k+ctx); c++ {
				show[c] = true
			}
		}
	}
	var sb strings.Builder
	changed, last := 0, -1
	for k, o := range ops {
		if !show[k] {
			continue
		}
		if k != last+1 {
			fmt.Fprintf(&sb, "@@ line %d @@\n", o.at)
		}
		last = k
		if o.kind != ' ' {
			if changed++; changed > maxChanged {
				sb.WriteString("... (more changes)\n")
				break
			}
		}
		fmt.Fprintf(&sb, "%c %s\n", o.kind, o.line)
	}
	return sb.String()
}

// golden compares got with the file at path, or rewrites the file with
// -update; a difference fails with a line diff (- the file, + the lowering).
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./lower -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the lowering (- file, + lowering; rerun with -update and review the diff):\n%s",
			path, lineDiff(string(want), got))
	}
}
