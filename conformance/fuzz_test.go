package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	cputarget "github.com/attnc/attnc/targets/cpu"
)

// FuzzKernels is the property test of hostile inputs: Go fuzzing over the
// metadata arrays and scalars of every CPU entry (a valid case from a few
// lengths, then up to four mutations to INT32 extremes, small shifts or
// arbitrary values), the generated kernels called through cgo with every
// buffer guarded by a PROT_NONE page, in a child process so that a crash or
// a hang is a reported failure rather than a lost run. For every input:
//
//   - never a signal (the child survives) and no hang;
//   - the status is the one the documented validation order gives
//     (validateRules, an independent Go statement of DESIGN §4 and docs/abi.md);
//   - status 0 ⇒ the outputs equal the float64 reference (attention; over
//     an 8-bit cache, code value × a random positive scale, exactly), the
//     byte model (append, copy_page, gather_pages, scatter_pages,
//     compact_copy; append into an 8-bit cache stores reference.Quantize's
//     codes, bit for bit), qkv_append's q_out and K rows within the
//     rounding bound of reference.QKVAppend and its V rows as append
//     stores them, read_kv's exact values rounded once, and rows no
//     sequence owns (read_kv: skipped rows) stay untouched;
//   - status < 0 ⇒ every output is untouched.
//
// Param tensors are as large as their (fuzzed) named dims say, every
// element a hash of its index; one past 2^20 elements is mapped sparse, up
// to 64 GiB, with only the elements the reference reads written, so a flat
// index computed in 32 bits reads outside the mapping. Inputs whose
// documented reads need more memory than the test allocates (a valid
// table naming a billion pages) are skipped. Run it with
// `go test ./conformance -run XXX -fuzz FuzzKernels -fuzztime 12000x`
// (a count, not a duration: Go 1.26's coordinator can report its own
// time deadline as a failure, go.dev/issue/75804).
func FuzzKernels(f *testing.F) {
	needtool.Check(f, cpurt.Tools())
	dir := f.TempDir()
	// The variants build on every core: the seeds run after all of the
	// package's tests, with nothing beside them.
	vs := fuzzVariants()
	errs := make([]error, len(vs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, v := range vs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s, err := buildHostLevel(v, dir)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %v", v.Name, err)
				return
			}
			s.Lib.Close()
			fuzzSOs[i] = filepath.Join(dir, v.Name+".so")
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.Fatal(err)
	}
	// Fuzzing (CI's fuzz pass, .ci/run) runs the whole corpus as its
	// baseline; the default run its every fuzzSeedStride-th mutation.
	for _, seed := range fuzzSeedsFor(fuzzing()) {
		f.Add(seed)
	}
	child := &fuzzChild{dir: dir}
	f.Cleanup(child.stop)
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := genFuzzCase(data)
		if fc.Role == ir.RolePrefill || fc.Role == ir.RoleDecode || fc.Role == ir.RolePrefillRagged {
			// The rules run here too, so that the fuzzer's coverage sees
			// which rule a case reaches (the child's coverage is not
			// reported back).
			validateRules(fuzzVariants()[fc.V], fc)
		}
		res, err := child.run(fc)
		if err != nil {
			t.Fatalf("%v\ncase: %s", err, fc)
		}
		if res.Skip {
			t.Skip(res.Msg)
		}
		if !res.Pass {
			t.Fatalf("%s\ncase: %s", res.Msg, fc)
		}
	})
}

// fuzzSpecs are small variants that cover both tables and layouts, f32,
// f16 and bf16, the data masks, windows with sinks, learned sinks,
// division by zero in a mask, the page kernels, qkv_append (qk_norm, rope
// at_append, from a schedule and from a table), prefill_ragged (with a
// tree, a custom mask, over an 8-bit cache), 8-bit caches (e4m3, e5m2,
// i8; per-tensor and per-head scales), a RoPE table, param tensors and
// inline RoPE of interleaved pairs.
var fuzzSpecs = []string{
	`variant fz_csr { heads qo = 4, kv = 2
	  head_dim 16
	  dtype f32
	  cache paged(page_size = 4)
	  kernels prefill, decode, merge_state, append, copy_page }`,
	`variant fz_bt { heads qo = 2, kv = 1
	  head_dim qk = 16, v = 8
	  dtype f16
	  cache paged(page_size = 2, layout = NHD, table = block_table)
	  mask window(left = 9)
	  sinks tokens(2)
	  kernels prefill, decode, append, copy_page }`,
	`variant fz_tree { heads qo = 2, kv = 2
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 1)
	  mask tree
	  sinks learned
	  kernels prefill, decode, merge_state, prefill_ragged }`,
	`variant fz_custom { heads qo = 2, kv = 1
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 8, table = block_table)
	  mask custom
	  kernels prefill, decode, merge_state, prefill_ragged }`,
	`variant fz_expr { heads qo = 2, kv = 1
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 4)
	  mask expr(kv_pos <= q_pos && q_pos % (kv_pos - 2) != 1) }`,
	// 8-bit caches: each kv_dtype, both scale kinds, each query dtype.
	`variant fz_e4m3 { heads qo = 4, kv = 2
	  head_dim 16
	  dtype f16
	  cache paged(page_size = 4, kv_dtype = e4m3, kv_scale = per_tensor)
	  kernels prefill, decode, append, copy_page, prefill_ragged }`,
	`variant fz_e5m2 { heads qo = 4, kv = 2
	  head_dim qk = 16, v = 8
	  dtype bf16
	  cache paged(page_size = 2, layout = NHD, table = block_table, kv_dtype = e5m2, kv_scale = per_head)
	  mask window(left = 9)
	  sinks tokens(2)
	  kernels prefill, decode, append }`,
	`variant fz_i8 { heads qo = 2, kv = 2
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 4, kv_dtype = i8, kv_scale = per_head)
	  kernels decode, append, copy_page }`,
	// The page kernels that move rows and pages, over a plain cache and
	// an 8-bit MLA cache.
	`variant fz_moves { heads qo = 2, kv = 2
	  head_dim qk = 8, v = 4
	  dtype f16
	  cache paged(page_size = 2, layout = NHD)
	  kernels read_kv, gather_pages, scatter_pages, compact_copy }`,
	// RoPE from a table: rope_positions and every rotated position are
	// checked before any table row is read.
	`variant fz_rope_table { heads qo = 2, kv = 1
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 2)
	  mask tree
	  rope inline(table, rotary_dim = 4, pairs = interleaved)
	  kernels prefill, decode, prefill_ragged }`,
	`variant fz_mla_pages { mla(heads = 2, kv_lora_rank = 8, rope_dim = 4)
	  dtype bf16
	  cache paged(page_size = 4, kv_dtype = e5m2)
	  scale 0.1
	  kernels append, copy_page, read_kv, gather_pages, scatter_pages, compact_copy }`,
	// qkv_append with qk_norm and rope at_append.
	`variant fz_qkv { heads qo = 4, kv = 2
	  head_dim 8
	  dtype f16
	  cache paged(page_size = 2, layout = NHD)
	  qk_norm rms(offset = 1)
	  rope at_append(theta = 10000, pairs = interleaved)
	  kernels qkv_append }`,
	// qkv_append with rope at_append from a table: rope_positions and
	// every token's position are checked before any table row is read.
	`variant fz_qkv_table { heads qo = 2, kv = 1
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 4)
	  rope at_append(table, rotary_dim = 4)
	  kernels qkv_append }`,
	// Param tensors: FlexAttention's packed-document mask and a score
	// table, with named dims (i32 arguments: negative, zero, short of the
	// positions, or huge).
	`variant fz_params { heads qo = 4, kv = 2
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 4)
	  param doc i32[batch, max_len]
	  param bias f32[nb, kv_heads]
	  mask expr(kv_pos <= q_pos && doc[batch, q_pos] == doc[batch, kv_pos])
	  score score + bias[kv_pos - q_pos + 8, head / 2]
	  kernels prefill, decode, prefill_ragged }`,
	// Inline RoPE by angles, GPT-J's interleaved pairs on half the head
	// dim: the CPU's decode turns K's rows as Q·Kᵀ reads them in place
	// (rot(..., interleaved)), hidden and outside pages staged and turned.
	// (A corpus entry's first byte modulo the variants' count picks its
	// variant: a new one goes last, and the entries' first bytes are
	// rewritten to their variants' indices — TestFuzzCorpusVariants.)
	`variant fz_rope_interleaved { heads qo = 4, kv = 2
	  head_dim 32
	  dtype f16
	  cache paged(page_size = 2)
	  rope inline(theta = 10000, pairs = interleaved, rotary_dim = 16)
	  kernels prefill, decode }`,
}

// fuzzCorpusVariants are the variant and role each entry of
// testdata/fuzz/FuzzKernels was found with (its regression).
var fuzzCorpusVariants = map[string][2]string{
	"00749c840edaf9c9": {"fz_e4m3", "prefill"},
	"4a9ccf0cc07dd4d6": {"fz_qkv_table", "qkv_append"},
	"771007607d76def1": {"fz_csr", "append"},
	"7f15e7b0c07d723a": {"fz_bt", "decode"},
	"ba33a5c933c1c7bb": {"fz_qkv", "qkv_append"},
}

// TestFuzzCorpusVariants checks that each corpus entry still decodes to
// the variant and role it was found with (genFuzzCase picks the variant
// by its first byte modulo len(fuzzSpecs), so a variant added to the list
// moves entries to others unless their first bytes are rewritten), and
// that every entry is listed.
func TestFuzzCorpusVariants(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/fuzz/FuzzKernels/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(fuzzCorpusVariants) {
		t.Errorf("%d corpus entries, fuzzCorpusVariants lists %d", len(files), len(fuzzCorpusVariants))
	}
	for _, f := range files {
		want, ok := fuzzCorpusVariants[filepath.Base(f)]
		if !ok {
			t.Errorf("%s: not in fuzzCorpusVariants", f)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a go test fuzz v1 []byte entry", f)
		}
		data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fc := genFuzzCase([]byte(data))
		if got := [2]string{fuzzVariants()[fc.V].Name, string(fc.Role)}; got != want {
			t.Errorf("%s decodes to %s %s, was found with %s %s", filepath.Base(f), got[0], got[1], want[0], want[1])
		}
	}
}

// fuzzSOs are the built libraries of fuzzSpecs.
var fuzzSOs = make([]string, len(fuzzSpecs))

var fuzzVariants = sync.OnceValue(func() []*ir.Variant {
	var vs []*ir.Variant
	for _, src := range fuzzSpecs {
		v, err := frontend.Parse("fuzz.attn", []byte(src))
		if err != nil {
			panic(err)
		}
		vs = append(vs, v[0])
	}
	return vs
})

// fuzzCase is one input: variant, role, scalar arguments and int32 arrays
// by argument name, and the seed of the float data.
type fuzzCase struct {
	V       int                `json:"v"`
	Role    ir.Role            `json:"role"`
	Scalars map[string]int64   `json:"scalars"`
	Arrays  map[string][]int32 `json:"arrays"`
	Seed    int64              `json:"seed"`
}

func (fc fuzzCase) String() string {
	b, _ := json.Marshal(fc)
	return string(b)
}

// fuzzExtremes are the values a mutation of kind 1 picks from.
var fuzzExtremes = []int64{math.MaxInt32, math.MinInt32, -1, -2, 0, 1, 1 << 30, 1<<30 + 1, 1<<30 - 1,
	math.MaxInt32 - 1, math.MinInt32 + 1, 1 << 16, -(1 << 16), 1 << 24, math.MaxInt32 / 2, math.MaxInt32/2 + 1}

// byteReader reads data byte by byte; past the end it reads zeros.
type byteReader struct {
	data []byte
	i    int
}

func (r *byteReader) byte() byte {
	if r.i >= len(r.data) {
		return 0
	}
	r.i++
	return r.data[r.i-1]
}

func (r *byteReader) intn(n int) int { return int(r.byte()) % n }

// genFuzzCase decodes data: variant, role, batch, per-sequence lengths,
// page layout flags, then mutations (target, index, kind, value) and the
// data seed. Any byte string decodes to a case.
//
//	b0 variant  b1 role  b2 batch (0..4)  then 2 bytes per sequence (q, kv)
//	then extra pages, flags, the mutation count (0..4), 4 bytes per
//	mutation, and 8 bytes of seed.
func genFuzzCase(data []byte) fuzzCase {
	r := &byteReader{data: data}
	vs := fuzzVariants()
	vi := r.intn(len(vs))
	v := vs[vi]
	var roles []ir.Role
	for _, k := range v.Kernels {
		roles = append(roles, k.Role)
	}
	fc := fuzzCase{V: vi, Role: roles[r.intn(len(roles))], Scalars: map[string]int64{}, Arrays: map[string][]int32{}}
	ps := v.PageSize
	switch fc.Role {
	case ir.RolePrefill, ir.RoleDecode, ir.RolePrefillRagged:
		prefill := fc.Role != ir.RoleDecode
		batch := r.intn(5)
		qLens, kvLens := make([]int, batch), make([]int, batch)
		for b := range batch {
			qLens[b] = 1
			if prefill {
				qLens[b] = r.intn(9)
			}
			kvLens[b] = qLens[b] + r.intn(40)
			if fc.Role == ir.RoleDecode {
				r.byte()
			}
		}
		extra := r.intn(4)
		flags := r.byte()
		pages, numPages := 0, extra
		for _, kv := range kvLens {
			pages += (kv + ps - 1) / ps
		}
		numPages += pages
		perm := rand.New(rand.NewSource(int64(flags))).Perm(max(numPages, 1))
		var seqPages [][]int32
		next := 0
		for b, kv := range kvLens {
			var ids []int32
			for j := range (kv + ps - 1) / ps {
				id := int32(perm[next%len(perm)])
				next++
				if flags&1 != 0 && b > 0 && j < len(seqPages[0]) && j < (kv-1)/ps {
					id = seqPages[0][j] // a shared prefix page
				}
				if flags&2 != 0 && j == 1 && (kv+ps-1)/ps > 2 {
					id = -1 // a hidden page
				}
				ids = append(ids, id)
			}
			seqPages = append(seqPages, ids)
		}
		fc.Scalars["batch_size"] = int64(batch)
		if prefill {
			qo := make([]int32, batch+1)
			qo[0] = int32(flags >> 6) // rows before the first sequence's are not used
			for b, q := range qLens {
				qo[b+1] = qo[b] + int32(q)
			}
			fc.Arrays["qo_indptr"] = qo
		}
		switch {
		case fc.Role == ir.RolePrefillRagged:
			ip := make([]int32, batch+1)
			ip[0] = int32(flags>>4) & 3 // rows before the first sequence's are not used
			for b, kv := range kvLens {
				ip[b+1] = ip[b] + int32(kv)
			}
			fc.Arrays["kv_token_indptr"] = ip
		case v.Table == ir.BlockTable:
			fc.Scalars["num_pages"] = int64(numPages)
			mb := int(flags>>2) & 3
			for _, ids := range seqPages {
				mb = max(mb, len(ids))
			}
			table := make([]int32, batch*mb)
			for b, ids := range seqPages {
				for j := range mb {
					table[b*mb+j] = -1
					if j < len(ids) {
						table[b*mb+j] = ids[j]
					}
				}
			}
			fc.Scalars["max_blocks"] = int64(mb)
			fc.Arrays["block_table"] = table
			lens := make([]int32, batch)
			for b, kv := range kvLens {
				lens[b] = int32(kv)
			}
			fc.Arrays["kv_lens"] = lens
		default:
			fc.Scalars["num_pages"] = int64(numPages)
			indptr := make([]int32, batch+1)
			last := make([]int32, batch)
			var indices []int32
			for b, ids := range seqPages {
				indices = append(indices, ids...)
				indptr[b+1] = indptr[b] + int32(len(ids))
				if len(ids) > 0 {
					last[b] = int32(kvLens[b] - (len(ids)-1)*ps)
				}
			}
			fc.Arrays["kv_indptr"], fc.Arrays["kv_indices"], fc.Arrays["kv_last_page_len"] = indptr, indices, last
		}
		rows := func(b int) int32 {
			if prefill {
				return fc.Arrays["qo_indptr"][b]
			}
			return int32(b)
		}
		for _, m := range v.Masks {
			switch m.Kind {
			case ir.MaskTree:
				ti := make([]int32, batch+1)
				var order []int32
				for b := range batch + 1 {
					ti[b] = rows(b)
				}
				rng := rand.New(rand.NewSource(int64(flags)))
				for range int(rows(batch)) {
					left := int32(rng.Intn(8))
					order = append(order, left, left+int32(rng.Intn(4)))
				}
				fc.Arrays["tree_order_indptr"], fc.Arrays["tree_order"] = ti, order
			case ir.MaskCustom:
				mi := make([]int32, batch+1)
				for b := range batch {
					mi[b+1] = mi[b] + int32((qLens[b]*kvLens[b]+7)/8) + int32(flags>>7)
				}
				fc.Arrays["mask_indptr"] = mi
			}
		}
		if v.InlineRope() != nil {
			// Positions as an engine sends them (each token at its
			// position plus the sequence's offset), a table with up to 2
			// spare rows; mutations move them out of range. They come
			// from the flags, so the seeds' mutation bytes stay in place.
			rng := rand.New(rand.NewSource(int64(flags) + 1))
			offs := make([]int32, batch)
			var qpos []int32
			top := int32(-1)
			for b := range batch {
				offs[b] = int32(rng.Intn(8))
				for i := range qLens[b] {
					qpos = append(qpos, int32(kvLens[b]-qLens[b]+i)+offs[b])
				}
				top = max(top, offs[b]+int32(kvLens[b])-1)
			}
			lead := make([]int32, max(rows(0), 0)) // rows before the first sequence's
			fc.Arrays["q_rope_position"] = append(lead, qpos...)
			fc.Arrays["k_rope_pos_offset"] = offs
			fc.Scalars["rope_positions"] = int64(top + 1 + int32(rng.Intn(3)))
		}
		if len(v.Params) > 0 {
			// Named param dims as an engine sends them: about the longest
			// kv_len (one short of it reads past the shape at the last
			// position), from the flags; mutations make them negative, 0
			// or huge (a tensor of 2^31 elements and more).
			rng := rand.New(rand.NewSource(int64(flags) + 2))
			longest := 0
			for _, kv := range kvLens {
				longest = max(longest, kv)
			}
			for _, name := range v.ParamDimNames() {
				fc.Scalars[name] = int64(max(0, longest+rng.Intn(4)-1))
			}
		}
	case ir.RoleAppend, ir.RoleQKVAppend:
		n := r.intn(6)
		np := 2 + r.intn(3)
		pm := make([]int32, n)
		for i := range pm {
			pm[i] = int32(r.intn(np*ps+1)) - 1
		}
		fc.Scalars["n"], fc.Scalars["num_pages"] = int64(n), int64(np)
		fc.Arrays["position_map"] = pm
		switch {
		case fc.Role == ir.RoleQKVAppend && v.Rope != nil && v.Rope.Style == ir.RopeTable:
			// Positions inside a table with up to 2 spare rows; mutations
			// move them or rope_positions out of range.
			pos := make([]int32, n)
			top := int32(-1)
			for i := range pos {
				pos[i] = int32(r.byte())
				top = max(top, pos[i])
			}
			fc.Arrays["positions"] = pos
			fc.Scalars["rope_positions"] = int64(top + 1 + int32(r.intn(3)))
		case fc.Role == ir.RoleQKVAppend:
			// Any position is valid (rope at_append rotates at it).
			pos := make([]int32, n)
			for i := range pos {
				pos[i] = int32(r.byte())<<12 | int32(r.byte())
			}
			fc.Arrays["positions"] = pos
		}
	case ir.RoleCopyPage:
		np := 2 + r.intn(3)
		fc.Scalars["num_pages"] = int64(np)
		fc.Scalars["src_page"], fc.Scalars["dst_page"] = int64(r.intn(np)), int64(r.intn(np))
		fc.Scalars["length"] = int64(r.intn(ps + 1))
	case ir.RoleMergeState:
		fc.Scalars["n"] = int64(r.intn(4))
	default:
		genFuzzMoves(r, v, fc)
	}
	// Mutations: scalars first, then arrays, in name order.
	targets := sortedKeys(fc.Scalars)
	targets = append(targets, sortedKeys(fc.Arrays)...)
	orig := maps.Clone(fc.Scalars)
	for range r.intn(5) {
		t := targets[r.intn(len(targets))]
		idx, kind, val := int(r.byte()), r.intn(3), r.byte()
		var x int64
		if s, ok := fc.Scalars[t]; ok {
			x = mutate(s, kind, val)
			if (t == "batch_size" || t == "n") && !fuzzTooLarge(v, fc.Role, t, x) {
				// Arrays hold the original count; a larger one would lie
				// about them, unless the count alone is TOO_LARGE, which
				// every entry decides before it reads an array (a count
				// grown so is capped again by a later mutation that
				// brings it back under the limit).
				x = min(x, orig[t])
			}
			fc.Scalars[t] = x
			continue
		}
		a := fc.Arrays[t]
		if len(a) == 0 {
			continue
		}
		a[idx%len(a)] = int32(mutate(int64(a[idx%len(a)]), kind, val))
	}
	for range 8 {
		fc.Seed = fc.Seed<<8 | int64(r.byte())
	}
	return fc
}

// fuzzTooLarge reports whether count name = x of a call of role is
// TOO_LARGE by its count alone (the items it makes: x rows times the kv
// heads for append, qkv_append and read_kv, x pages of page_size rows for
// gather_pages and scatter_pages, x sequences for compact_copy, x rows
// times the qo heads for merge_state, each past 2^31-1).
func fuzzTooLarge(v *ir.Variant, role ir.Role, name string, x int64) bool {
	per := int64(0)
	switch {
	case name == "n" && (role == ir.RoleAppend || role == ir.RoleQKVAppend || role == ir.RoleReadKV):
		per = int64(v.KVHeads)
	case name == "n" && (role == ir.RoleGatherPages || role == ir.RoleScatterPages):
		per = int64(v.PageSize * v.KVHeads)
	case name == "batch_size" && role == ir.RoleCompactCopy:
		per = int64(v.KVHeads)
	case name == "n" && role == ir.RoleMergeState:
		per = int64(v.QOHeads)
	}
	return per > 0 && x*per > lower.MaxItems
}

// mutate is x shifted by a small delta (kind 0), an extreme (kind 1) or a
// small absolute value (kind 2), as an int32.
func mutate(x int64, kind int, val byte) int64 {
	switch kind {
	case 0:
		return int64(int32(x + int64(int8(val))))
	case 1:
		return fuzzExtremes[int(val)%len(fuzzExtremes)]
	}
	return int64(val) - 128
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// fuzzing reports whether this test binary fuzzes (go test -fuzz: the
// coordinator and its workers), rather than running the seeds as tests.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// fuzzSeedStride: the default run (go test without -fuzz) of FuzzKernels
// takes every variant and role unmutated and, of the mutation seeds of
// each, those whose target, extreme and entry sum to the role's place
// modulo fuzzSeedStride: every target and entry, and per variant every
// extreme, still once or more (TestFuzzSeedsReachChecks holds for both
// corpora). Fuzzing (CI's fuzz pass) takes the whole corpus, fuzzSeeds.
const fuzzSeedStride = 4

// fuzzSeeds are the corpus: every variant and role unmutated, and with one
// mutation to each INT32 extreme of each scalar and array entry 0..2, each
// distinct case once (a scalar has no entries, an array of one entry has
// one, and a few targets' extremes clamp to the same count: of 13,139
// seeds 3,960 make distinct cases, and a case is all the child and the
// rules see). An
// 8-bit cache's validation is the others' (its metadata is the same), so
// its variants seed a few unmutated cases with other lengths and data
// instead of the mutations; the MLA cache's page kernels are its own, so
// it gets both (the mutations of entry 0 of each array).
func fuzzSeeds() [][]byte { return fuzzSeedsFor(true) }

// fuzzSeedsFor is fuzzSeeds (all), or the default run's part of it
// (fuzzSeedStride).
func fuzzSeedsFor(all bool) [][]byte {
	var out [][]byte
	seen := map[string]bool{}
	add := func(seeds ...[]byte) {
		for _, seed := range seeds {
			if c := genFuzzCase(seed).String(); !seen[c] {
				seen[c] = true
				out = append(out, seed)
			}
		}
	}
	for vi, v := range fuzzVariants() {
		for ri := range v.Kernels {
			base := []byte{byte(vi), byte(ri), 2, 3, 9, 2, 17, 1, 0b0100_0011}
			add(append(append([]byte(nil), base...), 0))
			if v.Quantized() {
				add(
					[]byte{byte(vi), byte(ri), 4, 1, 39, 8, 30, 0, 5, 3, 1, 2, 0b0000_0001, 0, 1, 2, 3, 4, 5, 6, 7, 8},
					[]byte{byte(vi), byte(ri), 1, 8, 38, 3, 0b0000_0010, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x2a})
				if v.MLA == nil {
					continue
				}
			}
			idxs := 3
			if v.Quantized() {
				idxs = 1 // MLA: entry 0 of each array, the others' checks are its own
			}
			for t := range 8 {
				for e := range fuzzExtremes {
					for idx := range idxs {
						if !all && (t+e+idx)%fuzzSeedStride != ri%fuzzSeedStride {
							continue
						}
						add(append(append([]byte(nil), base...), 1, byte(t), byte(idx), 1, byte(e)))
					}
				}
			}
		}
	}
	return out
}

// fuzzResult is the child's verdict on one case.
type fuzzResult struct {
	Status int32  `json:"status"`
	Pass   bool   `json:"pass"`
	Skip   bool   `json:"skip"`
	Msg    string `json:"msg"`
}

// fuzzChild runs cases in a child process (this test binary running
// TestFuzzChild), restarted after it dies.
type fuzzChild struct {
	dir string
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (c *fuzzChild) start() error {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFuzzChild$", "-test.count=1")
	env := append(os.Environ(), "ATTNC_FUZZ_CHILD=1")
	for i, so := range fuzzSOs {
		env = append(env, fmt.Sprintf("ATTNC_FUZZ_SO%d=%s", i, so))
	}
	cmd.Env = env
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	c.cmd, c.in, c.out = cmd, in, bufio.NewReaderSize(out, 1<<20)
	return nil
}

func (c *fuzzChild) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		c.in.Close()
		c.cmd.Process.Kill()
		c.cmd.Wait()
		c.cmd = nil
	}
}

// run sends fc to the child and returns its verdict; a child that dies or
// takes more than a minute is an error (and is restarted for the next case).
func (c *fuzzChild) run(fc fuzzCase) (fuzzResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		if err := c.start(); err != nil {
			return fuzzResult{}, err
		}
	}
	line, _ := json.Marshal(fc)
	type reply struct {
		res fuzzResult
		err error
	}
	done := make(chan reply, 1)
	go func() {
		if _, err := c.in.Write(append(line, '\n')); err != nil {
			done <- reply{err: err}
			return
		}
		l, err := c.out.ReadBytes('\n')
		if err != nil {
			done <- reply{err: err}
			return
		}
		var res fuzzResult
		err = json.Unmarshal(l, &res)
		done <- reply{res: res, err: err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return r.res, nil
		}
		c.cmd.Process.Kill()
		werr := c.cmd.Wait()
		c.cmd = nil
		return fuzzResult{}, fmt.Errorf("the kernel's process died: %v (%v)", werr, r.err)
	case <-time.After(time.Minute):
		c.cmd.Process.Kill()
		c.cmd.Wait()
		c.cmd = nil
		return fuzzResult{}, fmt.Errorf("the kernel hung (no answer in a minute)")
	}
}

// runGuarded is runFuzzCase with a panic of the test's own Go code (not a
// kernel crash, which kills the process) turned into a failed verdict.
func runGuarded(s *Suite, fc fuzzCase) (res fuzzResult) {
	defer func() {
		if x := recover(); x != nil {
			res = fuzzResult{Msg: fmt.Sprintf("test panic: %v\n%s", x, debug.Stack())}
		}
	}()
	return runFuzzCase(s, fc)
}

// TestFuzzChild is FuzzKernels' child process: it reads cases from stdin
// and answers with a verdict per line. It does nothing in a normal run.
func TestFuzzChild(t *testing.T) {
	if os.Getenv("ATTNC_FUZZ_CHILD") == "" {
		t.Skip("the child process of FuzzKernels")
	}
	suites := map[int]*Suite{}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return
		}
		var fc fuzzCase
		if err := json.Unmarshal(line, &fc); err != nil {
			t.Fatal(err)
		}
		s := suites[fc.V]
		if s == nil {
			lib, err := cpurt.Open(os.Getenv(fmt.Sprintf("ATTNC_FUZZ_SO%d", fc.V)))
			if err != nil {
				t.Fatal(err)
			}
			s = fuzzSuite(t, fuzzVariants()[fc.V], lib)
			suites[fc.V] = s
		}
		b, _ := json.Marshal(runGuarded(s, fc))
		out.Write(append(b, '\n'))
		out.Flush()
	}
}

// fuzzSuite is the suite that runs fuzz cases of v on lib (v's library
// at this machine's level): v lowered with the CPU tiling for the
// reference's shapes, the CPU harness.
func fuzzSuite(t *testing.T, v *ir.Variant, lib Library) *Suite {
	t.Helper()
	m, err := lower.Lower(v, cputarget.Target{}.Tiling(v))
	if err != nil {
		t.Fatal(err)
	}
	tgt, h, err := harnessOf("cpu")
	if err != nil {
		t.Fatal(err)
	}
	s := newSuite(v, tgt, h, m, m)
	s.Lib = lib
	return s
}
