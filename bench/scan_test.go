package bench

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/internal/lltest"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// scanWant is the paged scan's sum over page set r, found independently of
// the scan's plan: for each sequence, kv head and position the decode
// query sees (reference.Visible), the row's bytes at reference.PageIndex
// of the pool page the set puts the case's page on; rows that follow each
// other in memory within one page form one run, summed as whole
// little-endian 8-byte words and then the remaining bytes.
func scanWant(w *poolWorkload, c *reference.Case, r int) (sum, bytes int64) {
	v := w.s.V
	es := v.KVDType.Info().Bits / 8
	set := w.sets[r%len(w.sets)]
	runSumOf := func(b []byte) int64 {
		var s uint64
		i := 0
		for ; i+8 <= len(b); i += 8 {
			var x uint64
			for k := 7; k >= 0; k-- {
				x = x<<8 | uint64(b[i+k])
			}
			s += x
		}
		for ; i < len(b); i++ {
			s += uint64(b[i])
		}
		return int64(s)
	}
	for b, pages := range c.Pages {
		kvLen := c.KVLens[b]
		for h := range v.KVHeads {
			for k, pool := range w.pools {
				d := []int{v.HeadDimQK, v.HeadDimV}[k]
				if v.MLA != nil {
					d = []int{v.MLA.KVLoraRank, v.MLA.RopeDim}[k]
				}
				runLo, runHi := -1, -1 // the current run, in bytes
				flush := func() {
					if runLo >= 0 {
						sum += runSumOf(pool.U8()[runLo:runHi])
						bytes += int64(runHi - runLo)
					}
					runLo, runHi = -1, -1
				}
				for i, p := range pages {
					for slot := range v.PageSize {
						pos := i*v.PageSize + slot
						if pos >= kvLen || !reference.Visible(v, b, h, kvLen-1, pos) {
							continue
						}
						at := reference.PageIndex(v, set[p], h, slot, 0, d) * es
						if at != runHi {
							flush()
							runLo = at
						}
						runHi = at + d*es
					}
					flush() // runs end with the page
				}
			}
		}
	}
	return sum, bytes
}

// The paged scan reads exactly the bytes the decode case reads: every
// visible row of every kv head in every page, K and V, in the layout and
// storage dtype of the variant (HND and NHD, CSR and block table, 16-bit,
// f32 and 8-bit rows, rows that are no whole number of vectors or words,
// windows with sink tokens, MLA's two latent pools), at every prefetch
// distance and thread count, items split when there are fewer than
// threads; its sum of the bytes read equals the sum computed here.
func TestPagedScan(t *testing.T) {
	needTools(t)
	levels := ReadMachine().Levels()
	y, err := buildYardLib(levels[0], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer y.close()
	for _, tc := range []struct{ src string }{
		{small},
		{blockTable},
		{`variant q8 { heads qo = 4, kv = 2
  head_dim 36
  dtype f16
  cache paged(page_size = 16, layout = NHD, kv_dtype = e4m3)
  mask window(left = 40)
  sinks tokens(4) }`},
		{`variant f32w { heads qo = 2, kv = 2
  head_dim 18
  dtype f32
  cache paged(page_size = 4, layout = HND, table = block_table)
  mask causal }`},
		{`variant mla { mla(heads = 4, kv_lora_rank = 64, rope_dim = 16)
  scale 0.125
  dtype bf16
  cache paged(page_size = 8)
  mask causal }`},
	} {
		v := variant(t, tc.src)
		t.Run(v.Name, func(t *testing.T) {
			// The workload's arguments only: the scan calls no kernel
			// (TestRunCPU runs it beside a built one).
			s := &conformance.Suite{V: v, Entries: map[ir.Role]conformance.Entry{ir.RoleDecode: {}}}
			sh := workloadShape{qLens: []int{1, 1, 1}, kvLens: []int{70, 33, 129}}
			w, err := newPoolWorkload(s, ir.RoleDecode, sh, 1<<20, 0, 2, 7)
			if err != nil {
				t.Fatal(err)
			}
			defer w.free()
			c := w.c
			for _, threads := range []int{1, 2, 8} {
				sc, err := newPagedScan(w, threads)
				if err != nil {
					t.Fatal(err)
				}
				defer sc.free()
				// 3 sequences on 8 threads: 3 chunks each, chunk-major
				// (more than one kv head), or each item's chunks adjacent
				// (one: 3 items, 3 chunks each).
				if want := map[int]int{1: 1, 2: 1, 8: 3}[threads]; sc.splits != want || sc.nItems() != 3*v.KVHeads*want {
					t.Errorf("3 sequences on %d threads: %d chunks, %d items; want %d chunks", threads, sc.splits, sc.nItems(), want)
				}
				// Item (k*3 + b)*kv_heads + h: chunk k of sequence b, kv
				// head h; one kv head: item b*3 + k.
				chunk1 := 3 * v.KVHeads
				if v.KVHeads == 1 {
					chunk1 = 1
				}
				for i := range sc.nItems() {
					if sc.items[3*i+2] != int64(i%v.KVHeads) {
						t.Fatalf("item %d reads kv head %d", i, sc.items[3*i+2])
					}
				}
				if sc.splits > 1 {
					if c0, c1 := sc.items[0], sc.items[3*chunk1]; sc.visits[3*c1] <= sc.visits[3*c0] {
						t.Errorf("sequence 0's second chunk starts at page %d, its first at %d", sc.visits[3*c1], sc.visits[3*c0])
					}
				}
				out := newSlots(threads)
				defer out.free()
				for r := range len(w.tables) + 1 {
					want, bytes := scanWant(w, c, r)
					if bytes != w.kvBytes || sc.bytes != w.kvBytes {
						t.Fatalf("the rows read hold %d bytes, the scan plans %d, the case reads %d", bytes, sc.bytes, w.kvBytes)
					}
					if got := sc.wantSum(r%len(w.tables), threads); got != want {
						t.Fatalf("set %d: the scan's Go sum %#x, want %#x", r, got, want)
					}
					for _, ahead := range []int{0, 1, 2, 4, 1000} {
						for _, l2 := range []bool{false, true} {
							if _, err := y.scan(sc, r, threads, ahead, l2, out); err != nil {
								t.Fatalf("%d threads, %d ahead, into L2 %v: %v", threads, ahead, l2, err)
							}
						}
					}
				}
				// A wrong expected sum is caught.
				sc.want[0]++
				if _, err := y.scan(sc, 0, threads, 1, true, out); err == nil || !strings.Contains(err.Error(), "summed") {
					t.Errorf("a wrong sum passed: %v", err)
				}
				sc.want[0]--
			}
			sc, err := newPagedScan(w, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer sc.free()
			// Each round calls the decode twice (first, then timed), then
			// the scan with every prefetch, each call on its own page set
			// after one untimed call on the last set.
			var sets []int
			decode := func(set int) (float64, error) {
				sets = append(sets, set)
				return float64(len(sets)), nil
			}
			m, warm, first, err := y.measureScan(sc, 2, Budget{Reps: 2}, decode)
			if err != nil {
				t.Fatal(err)
			}
			round := 2 + len(scanTries)
			if last := len(w.tables) - 1; !slices.Equal(sets, []int{last, 0, 1, round, round + 1}) {
				t.Errorf("decode called on sets %v, want [%d 0 1 %d %d]", sets, last, round, round+1)
			}
			if !slices.Equal(first, []float64{2, 4}) || !slices.Equal(warm, []float64{3, 5}) {
				t.Errorf("first calls timed %v, second %v; want [2 4], [3 5]", first, warm)
			}
			if _, warm, first, err := y.measureScan(sc, 2, Budget{Reps: 1}, nil); err != nil || warm != nil || first != nil {
				t.Errorf("without a decode: %v, %v, %v", warm, first, err)
			}
			if len(m.Tried) != len(scanTries) || m.M.Amount != float64(w.kvBytes) || m.Rate.N != 2 || m.Rate.Min <= 0 || m.TimeMS.N != 2 {
				t.Errorf("measured %+v", m)
			}
			for i, tr := range m.Tried {
				if tr.Ahead != scanTries[i].Ahead || tr.L2 != scanTries[i].L2 || tr.Rate.N != 2 || tr.Rate.Median > m.Rate.Median {
					t.Errorf("tried %+v, kept %d ahead (into L2 %v) at %.3f GB/s", tr, m.Ahead, m.L2, m.Rate.Median)
				}
			}
		})
	}
}

// TestScanGrab: the scan's grabs follow the kernels' parallel_for rule,
// over the hand-worked table targets/cpu's TestGrab runs the generated
// rule over (threads are capped at the items as in parallel_for).
func TestScanGrab(t *testing.T) {
	cases := lltest.GrabCases(t, filepath.Join("..", "targets", "cpu", "testdata", "grabs.table"))
	cases = append(cases, lltest.GrabCase{N: 3, T: 8, Run: 1, Next: 0, Want: 1}) // more threads than items
	for _, c := range cases {
		if got := scanGrab(c.N, c.T, c.Run, c.Next); got != int64(c.Want) {
			t.Errorf("scanGrab(%d, %d, %d, %d) = %d, want %d", c.N, c.T, c.Run, c.Next, got, c.Want)
		}
	}
}
