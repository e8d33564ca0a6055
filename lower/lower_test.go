package lower

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func testVariant() *ir.Variant {
	return &ir.Variant{Name: "t", QOHeads: 4, KVHeads: 2, HeadDimQK: 8, HeadDimV: 8, DType: ir.DTF32,
		PageSize: 4, Scale: 0.35, Masks: []ir.MaskClause{{Kind: ir.MaskCausal}},
		Kernels: []ir.KernelRef{{Role: ir.RolePrefill}, {Role: ir.RoleDecode}, {Role: ir.RoleMergeState}}}
}

// cpuLike is a CPU-like tiling: 64-position tiles, up to 64 rows.
var cpuLike = Tiling{KVTile: 64, Rows: 64, MaxHeads: 16}

// gpuLike pads every item to 16 rows, as tensor cores want.
var gpuLike = Tiling{KVTile: 32, Rows: 16, PadRows: true, MaxHeads: 16}

// loops returns the For statements of b (recursively) in order.
func loops(b *ir.Block) []*ir.For {
	var out []*ir.For
	ir.MapStmts(b, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok {
			out = append(out, f)
		}
		return []ir.Stmt{s}
	})
	return out
}

func countLoads(b *ir.Block, buf string) int {
	n := 0
	ir.MapExprs(b, func(e ir.Expr) ir.Expr {
		if l, ok := e.(*ir.Load); ok && l.Buf == buf {
			n++
		}
		return e
	})
	return n
}

// TestGQAGrouping checks that each KV tile stages K and V once (in the
// @stage loop) for every qo head of the work item, and that the score
// matmul then reads the staged tile for all of the item's rows.
func TestGQAGrouping(t *testing.T) {
	for _, g := range []int{1, 4, 8} {
		v := testVariant()
		v.QOHeads, v.KVHeads = 2*g, 2
		m, err := Lower(v, cpuLike)
		if err != nil {
			t.Fatal(err)
		}
		tiles := 0
		for _, k := range m.Kernels {
			for _, tile := range loops(k.Body) {
				if tile.Tag != ir.TagKVTile {
					continue
				}
				tiles++
				var stage *ir.For
				var mm *ir.MatMul
				for _, s := range tile.Body.Stmts {
					switch x := s.(type) {
					case *ir.For:
						if x.Tag == ir.TagStage {
							stage = x
						}
					case *ir.MatMul:
						if mm == nil {
							mm = x
						}
					}
				}
				if stage == nil || mm == nil {
					t.Fatalf("%s: kv tile without a stage loop and a score matmul", k.Name)
				}
				if countLoads(tile.Body, "k_pages") != 1 || countLoads(stage.Body, "k_pages") != 1 ||
					countLoads(tile.Body, "v_pages") != 1 || countLoads(stage.Body, "v_pages") != 1 {
					t.Errorf("%s: K/V must be loaded exactly once per tile, in the stage loop", k.Name)
				}
				if mm.A != "qs" || mm.B != "kb" || !mm.TransB || mm.M < g {
					t.Errorf("%s: score matmul %s = %s * %s over %d rows, want qs * kb^T over the group's %d heads",
						k.Name, mm.C, mm.A, mm.B, mm.M, g)
				}
			}
		}
		if tiles != 3 {
			t.Errorf("group %d: %d kv tile loops, want 3 (prefill, decode, split decode)", g, tiles)
		}
	}
}

// TestNextItemOnlyForKVHeadRuns checks where the lowering names a staging
// loop's next item (Tiling.DecodeNextItem): in decode, whose items come in
// runs of a sequence's kv heads, the next kv head's item from the item's
// first tile (kv_first); not in prefill, not over one kv head (MQA: the
// next item is another sequence's), not over head tiles (the next item is
// the same kv head's next group of heads), nor without the tiling's flag.
func TestNextItemOnlyForKVHeadRuns(t *testing.T) {
	on := Tiling{KVTile: 16, Rows: 16, MaxHeads: 8, PageRuns: true, DecodeDirect: true, SplitBySequence: true, DecodeOneKernel: true, DecodeNextItem: true}
	off := on
	off.DecodeNextItem = false
	for _, c := range []struct {
		name     string
		qo, kv   int
		tiling   Tiling
		wantNext bool
	}{
		{"gqa 8/2", 8, 2, on, true},
		{"mha 4/4", 4, 4, on, true},
		{"mqa 8/1", 8, 1, on, false},
		{"head tiles 24/2", 24, 2, on, false}, // groups of 12 over MaxHeads 8
		{"flag off", 8, 2, off, false},
	} {
		v := testVariant()
		v.QOHeads, v.KVHeads = c.qo, c.kv
		v.Kernels = roles(ir.RolePrefill, ir.RoleDecode)
		m, err := Lower(v, c.tiling)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		stages := 0
		for _, k := range m.Kernels {
			for _, f := range loops(k.Body) {
				if f.Tag != ir.TagStage {
					continue
				}
				stages++
				want := c.wantNext && k.Role == ir.RoleDecode
				if (f.Next != nil) != want {
					t.Errorf("%s: %s: staging loop next %v, want one: %v", c.name, k.Name, f.Next != nil, want)
					continue
				}
				if f.Next == nil {
					continue
				}
				got := ir.StmtString(&ir.For{Var: f.Var, Lo: f.Lo, Hi: f.Hi, Kind: f.Kind, Next: f.Next, Body: &ir.Block{}})
				if w := fmt.Sprintf("next [kv_lo = kv_first, kvh = (kvh + 1)] if ((kvh + 1) < %d)", c.kv); !strings.Contains(got, w) {
					t.Errorf("%s: %s: %s, want %s", c.name, k.Name, got, w)
				}
			}
		}
		if stages < 2 {
			t.Errorf("%s: %d staging loops, want prefill's and decode's", c.name, stages)
		}
	}
}

// TestWindowWalkStartsAtWindow checks where the KV tile walks of a
// sliding window or a chunked expr mask start: at the tile of the mask's
// floor for q_pos0 (q_pos0 - W for the tightest window, the chunk's first
// position for q_pos / C == kv_pos / C, the highest of several) in
// prefill, decode and split decode, whose chunks split the tiles from
// there on; at 0 when sink tokens add the first positions back, or no
// clause bounds kv_pos from below.
func TestWindowWalkStartsAtWindow(t *testing.T) {
	qp, kp := ir.R("q_pos", ir.I32), ir.R("kv_pos", ir.I32)
	chunk := ir.Bin(ir.And, ir.Bin(ir.Le, kp, qp), ir.Bin(ir.Eq, ir.Bin(ir.Div, qp, ir.Int(1024)), ir.Bin(ir.Div, kp, ir.Int(1024))))
	for _, c := range []struct {
		name  string
		masks []ir.MaskClause
		sinks *ir.Sinks
		first string // the t_first let, "" for none
	}{
		{"window 100", []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}}, nil, "min((max((q_pos0 - 100), 0) / 64), n_tiles)"},
		{"two windows", []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}, {Kind: ir.MaskWindow, Left: 30}}, nil, "min((max(max((q_pos0 - 100), (q_pos0 - 30)), 0) / 64), n_tiles)"},
		{"window, learned sinks", []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}}, &ir.Sinks{Kind: ir.SinkLearned}, "min((max((q_pos0 - 100), 0) / 64), n_tiles)"},
		{"window, sink tokens", []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}}, &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4}, ""},
		{"causal", []ir.MaskClause{{Kind: ir.MaskCausal}}, nil, ""},
		{"chunked expr", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: chunk}}, nil, "min((max(((q_pos0 / 1024) * 1024), 0) / 64), n_tiles)"},
		{"chunked expr and window", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: chunk}, {Kind: ir.MaskWindow, Left: 100}}, nil,
			"min((max(max(((q_pos0 / 1024) * 1024), (q_pos0 - 100)), 0) / 64), n_tiles)"},
		{"expr window, strict", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: ir.Bin(ir.And, ir.Bin(ir.Le, kp, qp), ir.Bin(ir.Lt, ir.Bin(ir.Sub, qp, kp), ir.Int(10)))}}, nil,
			"min((max((q_pos0 - 9), 0) / 64), n_tiles)"},
		{"chunks of two sizes", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: ir.Bin(ir.Eq, ir.Bin(ir.Div, qp, ir.Int(1024)), ir.Bin(ir.Div, kp, ir.Int(512)))}}, nil, ""},
		{"chunks per head", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: ir.Bin(ir.Eq, ir.Bin(ir.Div, qp, ir.Bin(ir.Add, ir.R("head", ir.I32), ir.Int(1))),
			ir.Bin(ir.Div, kp, ir.Bin(ir.Add, ir.R("head", ir.I32), ir.Int(1))))}}, nil, ""},
		{"window of a variable", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: ir.Bin(ir.Le, ir.Bin(ir.Sub, qp, kp), ir.R("head", ir.I32))}}, nil, ""},
		{"even positions", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: ir.Bin(ir.Eq, ir.Bin(ir.Rem, kp, ir.Int(2)), ir.Int(0))}}, nil, ""},
		{"chunked expr, sink tokens", []ir.MaskClause{{Kind: ir.MaskExpr, Expr: chunk}}, &ir.Sinks{Kind: ir.SinkTokens, Tokens: 4}, ""},
	} {
		v := testVariant()
		v.Masks, v.Sinks = c.masks, c.sinks
		m, err := Lower(v, cpuLike)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		walks := 0
		for _, k := range m.Kernels {
			text := k.String()
			for _, f := range loops(k.Body) {
				if f.Tag != ir.TagKVTile {
					continue
				}
				walks++
				lo := ir.ExprString(f.Lo)
				switch {
				case c.first == "" && lo != "0" && lo != "t_lo":
					t.Errorf("%s: %s: tile walk from %s, want 0 (or t_lo)", c.name, k.Name, lo)
				case c.first != "" && lo != "t_first" && lo != "t_lo":
					t.Errorf("%s: %s: tile walk from %s, want t_first (or t_lo)", c.name, k.Name, lo)
				}
			}
			if c.first == "" {
				if strings.Contains(text, "t_first") {
					t.Errorf("%s: %s declares t_first", c.name, k.Name)
				}
				continue
			}
			if k.Role != ir.RolePrefill && k.Role != ir.RoleDecode || !strings.Contains(text, "parallel") {
				continue
			}
			if want := "let t_first = " + c.first; !strings.Contains(text, want) {
				t.Errorf("%s: %s lacks %q", c.name, k.Name, want)
			}
			if strings.Contains(text, "let t_lo") {
				for _, want := range []string{"let per = (((n_tiles - t_first) + (splits - 1)) / splits)", "let t_lo = min(((sp * per) + t_first), n_tiles)"} {
					if !strings.Contains(text, want) {
						t.Errorf("%s: %s lacks %q", c.name, k.Name, want)
					}
				}
			}
		}
		if walks != 3 {
			t.Errorf("%s: %d tile walks, want 3 (prefill, decode, split decode)", c.name, walks)
		}
	}
}

// TestDecodeWindowTilesStartAtPageRun: with Tiling.DecodeWindowTiles a
// decode item's tiles start at its mask floor's page run (the floor
// rounded down to min(page size, KVTile)), kv_lo = kv_base + kt·64, in the
// direct and the split walk (whose chunks divide the tiles from
// kv_base), and the tile's position range for classify-tiles starts
// there too; prefill keeps t_first, and a mask without a floor has no
// kv_base.
func TestDecodeWindowTilesStartAtPageRun(t *testing.T) {
	tiling := cpuLike
	tiling.DecodeWindowTiles = true
	for _, c := range []struct {
		page  int
		masks []ir.MaskClause
		run   int // 0: no floor
	}{
		{4, []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}}, 4},
		{16, []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}}, 16},
		{1, []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}}, 1},
		{256, []ir.MaskClause{{Kind: ir.MaskWindow, Left: 100}}, 64},
		{16, []ir.MaskClause{{Kind: ir.MaskCausal}}, 0},
	} {
		v := testVariant()
		v.PageSize, v.Masks = c.page, c.masks
		m, err := Lower(v, tiling)
		if err != nil {
			t.Fatalf("page %d: %v", c.page, err)
		}
		decodes := 0
		for _, k := range m.Kernels {
			text := k.String()
			if k.Role != ir.RoleDecode || !strings.Contains(text, "parallel") {
				if c.run > 0 && k.Role == ir.RolePrefill && strings.Contains(text, "parallel") && !strings.Contains(text, "let t_first = ") {
					t.Errorf("page %d: %s lacks t_first", c.page, k.Name)
				}
				continue
			}
			decodes++
			if c.run == 0 {
				if strings.Contains(text, "kv_base") {
					t.Errorf("page %d, %s: %s declares kv_base", c.page, c.masks[0].Kind, k.Name)
				}
				continue
			}
			for _, want := range []string{
				fmt.Sprintf("let kv_base = ((min(max((q_pos0 - 100), 0), kv_len) / %d) * %d)", c.run, c.run),
				"let n_tiles_w = (((kv_len - kv_base) + 63) / 64)",
				"let kv_lo = (kv_base + (kt * 64))",
				"[kv_pos = (kv_base + (kt * 64)) .. (min(((kv_base + (kt * 64)) + 64), kv_len) - 1)",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("page %d: %s lacks %q", c.page, k.Name, want)
				}
			}
			if strings.Contains(text, "let t_lo") && !strings.Contains(text, "let per = ((n_tiles_w + (splits - 1)) / splits)") {
				t.Errorf("page %d: %s: the split's chunks do not divide the tiles from kv_base", c.page, k.Name)
			}
		}
		if decodes != 2 {
			t.Errorf("page %d: %d decode work kernels, want 2 (direct, split)", c.page, decodes)
		}
	}
}

// TestOnlineSoftmaxShape checks the skeleton's state update: the tile's
// max is a reduce, the running max is raised, the old accumulator rescaled
// by exp(m_old - m_new), a row with everything masked so far adds nothing,
// and P·V is a zeroskip matmul.
func TestOnlineSoftmaxShape(t *testing.T) {
	m, _ := Lower(testVariant(), cpuLike)
	text := m.Kernel("t_prefill_work").String()
	for _, want := range []string{
		"reduce m_tile = maxnum over j in 0 .. 64 of select((j < kv_n), sc[((row * 64) + j)], -inf:f32)",
		"let live = not((m_new == -inf:f32))", // a NaN max is live (DESIGN §3)
		"let a = select(live, exp((m_old - m_new)), 1.0:f32)",
		"store den[row] = ((den[row] * a) + psum)",
		"store acc[((row * 8) + d)] = (acc[((row * 8) + d)] * a)",
		"matmul acc[64, 8] += sc[64, 64] * vb[64, 8] zeroskip extent(n_rows, 8, kv_n)",
		"let lse_v = select(not((lv == 0.0:f32)), (mx[row] + log(lv)), -inf:f32)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("prefill lacks %q", want)
		}
	}
}

// TestTilingIsTheOnlyTargetInput lowers one variant with two tilings: the
// skeletons differ only in sizes (padded rows are guarded), so the same
// statements appear in both.
func TestTilingIsTheOnlyTargetInput(t *testing.T) {
	v := testVariant()
	cpu, err := Lower(v, cpuLike)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := Lower(v, gpuLike)
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.Verify(gpu); err != nil {
		t.Fatal(err)
	}
	shape := func(m *ir.Module) []string {
		var kinds []string
		for _, k := range m.Kernels {
			ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
				kinds = append(kinds, fmt.Sprintf("%T", s))
				return []ir.Stmt{s}
			})
		}
		return kinds
	}
	if a, b := shape(cpu), shape(gpu); strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("the two tilings built different statement sequences:\n%v\n%v", a, b)
	}
	if p := gpu.Kernel("t_decode_work").String(); !strings.Contains(p, "alloc qs: f32[128]") {
		t.Errorf("padded decode items should hold 16 rows of 8 dims:\n%s", p)
	}
	for _, m := range []*ir.Module{cpu, gpu} {
		if len(m.Plans) != 3 {
			t.Fatalf("%d plans, want prefill, decode and merge_state", len(m.Plans))
		}
	}
}

func TestUnsupported(t *testing.T) {
	p := ir.Pos{File: "s.attn", Line: 3, Col: 5}
	cases := map[string]func(*ir.Variant){
		"s.attn:3:5: not supported yet: rope inline with mla (MLA's rope part arrives rotated in q_pe and kpe_pages)": func(v *ir.Variant) {
			v.MLA, v.Rope = &ir.MLA{Pos: p}, &ir.Rope{Pos: p}
		},
		"s.attn:3:5: not supported yet: kernel prefill_ragged with mla": func(v *ir.Variant) {
			v.MLA = &ir.MLA{Pos: p}
			v.Kernels = append(v.Kernels, ir.KernelRef{Role: ir.RolePrefillRagged, Pos: p})
		},
		"s.attn:3:5: not supported yet: rope at_append with mla (MLA's rope part arrives rotated in q_pe and kpe_pages)": func(v *ir.Variant) {
			v.MLA, v.Rope = &ir.MLA{Pos: p}, &ir.Rope{Pos: p, AtAppend: true}
		},
		"s.attn:3:5: not supported yet: kernel qkv_append with mla": func(v *ir.Variant) {
			v.MLA = &ir.MLA{Pos: p}
			v.Kernels = append(v.Kernels, ir.KernelRef{Role: ir.RoleQKVAppend, Pos: p})
		},
	}
	for want, f := range cases {
		v := testVariant()
		f(v)
		_, err := Lower(v, cpuLike)
		if err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	}
}

// TestPrefillRaggedReadsRows: prefill_ragged's entry takes the ragged rows
// (k, v, kv_token_indptr) and nothing of the paged cache, its work kernel
// reads K/V only from k and v, stores o and lse like prefill, and hands
// over to no other role; over a quantized cache the rows are still the
// variant's dtype, without scales.
func TestPrefillRaggedReadsRows(t *testing.T) {
	for _, quant := range []bool{false, true} {
		v := testVariant()
		v.Kernels = append(v.Kernels, ir.KernelRef{Role: ir.RolePrefillRagged})
		if quant {
			v.KVDType, v.KVScale = ir.DTE4M3, ir.KVScalePerTensor
		}
		m, err := Lower(v, cpuLike)
		if err != nil {
			t.Fatal(err)
		}
		p := m.Plan(ir.RolePrefillRagged)
		if p == nil || p.Entry != "t_prefill_ragged" || p.Handoff != nil {
			t.Fatalf("quant %v: plan %+v", quant, p)
		}
		var names []string
		for _, a := range p.Params {
			names = append(names, a.Name)
			if (a.Name == "k" || a.Name == "v") && a.Elem != ir.F32 {
				t.Errorf("quant %v: %s holds %s, want the dtype f32", quant, a.Name, a.Elem)
			}
		}
		if got, want := strings.Join(names, ","), "q,qo_indptr,k,v,kv_token_indptr,batch_size,o,lse"; got != want {
			t.Errorf("quant %v: params %s, want %s", quant, got, want)
		}
		k := m.Kernel("t_prefill_ragged_work")
		if k == nil {
			t.Fatal("no t_prefill_ragged_work")
		}
		for buf, want := range map[string]bool{"k": true, "v": true, "k_pages": false, "v_pages": false, "kv_indices": false, "k_scale": false} {
			if got := countLoads(k.Body, buf) > 0; got != want {
				t.Errorf("quant %v: work kernel loads %s: %v, want %v", quant, buf, got, want)
			}
		}
		if err := ir.Verify(m); err != nil {
			t.Errorf("quant %v: %v", quant, err)
		}
	}
}

// TestAtAppendAttentionTakesNoRope: with rope at_append the attention
// entries take no RoPE positions and stage nothing rotated (the cache and
// q_out hold rotated rows); with rope inline they do. qkv_append takes
// positions only with rope at_append, the norm weights only with qk_norm.
func TestAtAppendAttentionTakesNoRope(t *testing.T) {
	for _, atAppend := range []bool{false, true} {
		v := testVariant()
		v.Rope = &ir.Rope{Theta: 10000, AtAppend: atAppend}
		v.Kernels = append(v.Kernels, ir.KernelRef{Role: ir.RoleQKVAppend})
		m, err := Lower(v, cpuLike)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Plans {
			has := map[string]bool{}
			for _, a := range p.Params {
				has[a.Name] = true
			}
			switch p.Role {
			case ir.RolePrefill, ir.RoleDecode:
				if has["q_rope_position"] == atAppend || has["k_rope_pos_offset"] == atAppend {
					t.Errorf("rope at_append %v: %s takes q_rope_position %v, k_rope_pos_offset %v", atAppend, p.Role, has["q_rope_position"], has["k_rope_pos_offset"])
				}
			case ir.RoleQKVAppend:
				if has["positions"] != atAppend || has["q_norm_weight"] || has["k_norm_weight"] {
					t.Errorf("rope at_append %v, no qk_norm: qkv_append's arguments %v", atAppend, has)
				}
			}
		}
		// The rotation (its turns table) is in qkv_append's kernel with
		// rope at_append, in the attention kernels otherwise.
		for _, k := range m.Kernels {
			rotates := strings.Contains(k.String(), "rope_turns")
			switch k.Role {
			case ir.RoleQKVAppend:
				if rotates != atAppend {
					t.Errorf("rope at_append %v: %s rotates %v", atAppend, k.Name, rotates)
				}
			case ir.RolePrefill, ir.RoleDecode:
				if rotates == atAppend {
					t.Errorf("rope at_append %v: %s rotates %v", atAppend, k.Name, rotates)
				}
			}
		}
	}
}

// TestQTileRowQuantum: with RowQuantum 32 (the CPU's), a prefill item's
// rows become a multiple of 32 with the fewest query rows at or above
// Rows/heads, unless that takes more than 2·Rows; without it, Rows/heads.
func TestQTileRowQuantum(t *testing.T) {
	plain := Tiling{KVTile: 64, Rows: 128, MaxHeads: 16}
	quant := plain
	quant.RowQuantum = 32
	for _, c := range []struct{ g, heads, plain, quant int }{
		{1, 1, 128, 128}, {2, 2, 64, 64}, {4, 4, 32, 32}, {8, 8, 16, 16}, {16, 16, 8, 8}, {128, 16, 8, 8},
		{3, 3, 42, 64},   // 192 rows
		{5, 5, 25, 32},   // 160
		{6, 6, 21, 32},   // 192
		{7, 7, 18, 32},   // 224
		{10, 10, 12, 16}, // 160
		{12, 12, 10, 16}, // 192
		{14, 14, 9, 16},  // 224
		{9, 9, 14, 14},   // 288 would exceed 256: unchanged
		{11, 11, 11, 11}, {13, 13, 9, 9}, {15, 15, 8, 8},
		{20, 10, 12, 16}, {21, 7, 18, 32}, // wide groups split into head tiles
	} {
		if h := quant.Heads(c.g); h != c.heads {
			t.Errorf("group %d: %d heads an item, want %d", c.g, h, c.heads)
		}
		if got := plain.QTile(c.g); got != c.plain {
			t.Errorf("group %d without RowQuantum: %d query rows, want %d", c.g, got, c.plain)
		}
		if got := quant.QTile(c.g); got != c.quant {
			t.Errorf("group %d with RowQuantum 32: %d query rows (%d rows), want %d", c.g, got, got*c.heads, c.quant)
		}
	}
}

// TestDecodeMaxHeads: with DecodeMaxHeads a decode item serves up to that
// many heads of the group (its Q·Kᵀ that many rows) while prefill's items
// keep MaxHeads, and the plans count their items by their own head tiles.
func TestDecodeMaxHeads(t *testing.T) {
	v := testVariant()
	v.QOHeads, v.KVHeads = 64, 1
	wide := cpuLike
	wide.DecodeMaxHeads = 32
	for _, c := range []struct {
		t                         Tiling
		decode                    int // heads a decode work item serves
		prefillItems, decodeItems string
	}{
		{cpuLike, 16, "(batch_size * 4)", "(batch_size * 4)"},
		{wide, 32, "(batch_size * 4)", "(batch_size * 2)"},
	} {
		if got := c.t.DecodeHeads(64); got != c.decode {
			t.Errorf("%+v: DecodeHeads(64) = %d, want %d", c.t, got, c.decode)
		}
		m, err := Lower(v, c.t)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range m.Kernels {
			if k.Role != ir.RoleDecode {
				continue
			}
			ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
				if mm, ok := s.(*ir.MatMul); ok && mm.TransB && mm.M != c.decode {
					t.Errorf("DecodeMaxHeads %d: %s's Q·Kᵀ has %d rows, want %d", c.t.DecodeMaxHeads, k.Name, mm.M, c.decode)
				}
				return []ir.Stmt{s}
			})
		}
		for _, p := range m.Plans {
			items := map[ir.Role]string{ir.RolePrefill: c.prefillItems, ir.RoleDecode: c.decodeItems}[p.Role]
			if items == "" || len(p.Direct) == 0 {
				continue
			}
			if got := ir.ExprString(p.Direct[0].Items); !strings.Contains(got, items) {
				t.Errorf("DecodeMaxHeads %d: %s runs %s items, want %s in it", c.t.DecodeMaxHeads, p.Entry, got, items)
			}
		}
	}
}
