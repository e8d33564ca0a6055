package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
)

// blockTable has a vLLM block table, a window and learned sinks.
const blockTable = `variant bt { heads qo = 4, kv = 1
  head_dim 64
  dtype bf16
  cache paged(page_size = 8, layout = NHD, table = block_table)
  mask window(left = 50)
  sinks learned }`

// Every rotated page set computes the attention of the case its pool pages
// hold, and the page sets are disjoint.
func TestPoolWorkload(t *testing.T) {
	needTools(t)
	for _, tc := range []struct {
		src       string
		tokenRows int64 // K+V elements per token
		seen      func(kvLen int) int64
	}{
		{small, 2 * 128, func(kvLen int) int64 { return int64(kvLen) }},
		{strings.Replace(small, "dtype f16", "dtype f32", 1), 2 * 128, func(kvLen int) int64 { return int64(kvLen) }},
		{blockTable, 1 * 128, func(kvLen int) int64 { return int64(min(kvLen, 51)) }},
	} {
		v := variant(t, tc.src)
		t.Run(v.Name+"_"+v.DType.String(), func(t *testing.T) {
			s, err := conformance.BuildWith(v, t.TempDir(), conformance.Options{CPULevels: hostLevels()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			es := int64(reference.Size(v.DType))
			sh := workloadShape{qLens: []int{1, 1, 1}, kvLens: []int{70, 33, 129}}
			casePages := 0
			for _, kv := range sh.kvLens {
				casePages += (kv + v.PageSize - 1) / v.PageSize
			}
			caseBytes := int64(casePages) * int64(v.PageSize) * tc.tokenRows * es
			w, err := newPoolWorkload(s, ir.RoleDecode, sh, 5*caseBytes+1, 0, 2, 7)
			if err != nil {
				t.Fatal(err)
			}
			defer w.free()
			if w.casePages != casePages || w.poolPages != 5*casePages+1 || len(w.tables) != 5 || len(w.sets) != 5 {
				t.Fatalf("case pages %d, pool pages %d, %d tables", w.casePages, w.poolPages, len(w.tables))
			}
			if w.tokenBytes != tc.tokenRows*es || w.pageBytes != w.tokenBytes*int64(v.PageSize) {
				t.Errorf("token bytes %d, page bytes %d", w.tokenBytes, w.pageBytes)
			}
			var seen int64
			for _, kv := range sh.kvLens {
				seen += tc.seen(kv)
			}
			if w.kvBytes != seen*w.tokenBytes || !w.exact {
				t.Errorf("kv bytes %d, want %d rows of %d", w.kvBytes, seen, w.tokenBytes)
			}
			used := map[int]bool{}
			for r, set := range w.sets {
				for _, p := range set {
					if used[p] || p < 0 || p >= w.poolPages {
						t.Fatalf("set %d: page %d reused or outside the pool", r, p)
					}
					used[p] = true
				}
			}
			for r := range 6 { // the sixth call reuses set 0
				if err := w.call(r); err != nil {
					t.Fatal(err)
				}
				wantO, _, mag := reference.AttentionMag(v, w.caseFor(r))
				got := reference.Decode(v.DType, w.o.U8())
				if e, i, ok := conformance.CompareOut(v.DType, got, wantO, mag); !ok {
					t.Fatalf("call %d: o[%d] = %v, want %v (error %.2e)", r, i, got[max(i, 0)], wantO[max(i, 0)], e)
				}
			}
			// A case that reads its own pages (no pool) has one set.
			w2, err := newPoolWorkload(s, ir.RoleDecode, sh, 0, 0, 1, 7)
			if err != nil {
				t.Fatal(err)
			}
			defer w2.free()
			if len(w2.tables) != 1 || w2.poolPages != casePages {
				t.Errorf("no pool: %d tables over %d pages", len(w2.tables), w2.poolPages)
			}
			if err := w2.call(3); err != nil {
				t.Fatal(err)
			}
			wantO, _, mag := reference.AttentionMag(v, w2.caseFor(3))
			if e, _, ok := conformance.CompareOut(v.DType, reference.Decode(v.DType, w2.o.U8()), wantO, mag); !ok {
				t.Errorf("no pool: error %.2e", e)
			}
			if _, err := newPoolWorkload(s, ir.RoleDecode, sh, 1<<40, 1<<30, 1, 7); err == nil || !strings.Contains(err.Error(), "does not fit") {
				t.Errorf("a pool larger than memory: %v", err)
			}
		})
	}
}

func TestRunCPU(t *testing.T) {
	needTools(t)
	h := Heads{QOHeads: 4, KVHeads: 2, HeadDim: 32, PageSize: 4}
	bs := []Builtin{{Role: ir.RoleDecode, DType: "f16"}, {Role: ir.RoleDecode, DType: "f16", KVDType: "e4m3"},
		{Role: ir.RoleDecode, DType: "f16", KVDType: "fp4"}, {Role: ir.RolePrefill, DType: "f32"}}
	var out strings.Builder
	r, err := RunCPU(BuiltinPlan(h, bs), CPUOptions{Threads: 2, Batch: 2, KVLen: 100, QLen: 40, PoolBytes: 1 << 20,
		StreamBytes: 2 << 20, BlockBytes: 256, Budget: Budget{Reps: 3}, Dir: t.TempDir(), Out: &out, CPULevels: hostLevels()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	if r.Threads != 2 || len(r.Cases) != 3 || len(r.Skipped) != 1 || len(r.Failed) != 0 || r.Yard == nil {
		t.Fatalf("report: %d cases, skipped %v, failed %v", len(r.Cases), r.Skipped, r.Failed)
	}
	dec, dec8, pre := r.Cases[0], r.Cases[1], r.Cases[2]
	// The 8-bit cache counts its bytes as stored: one per element.
	if dec8.Name != "decode f16/e4m3" || dec8.KVBytes != 2*100*2*64 || dec8.RatioTo != "stream_read" || dec8.Ratio <= 0 ||
		dec8.KVDType != "e4m3" || dec8.VsCache == nil || dec.KVDType != "" {
		t.Errorf("decode 8-bit: %+v", dec8)
	}
	// Each decode has its paged scan, over its own bytes, at every
	// prefetch (distance and cache level); the 8-bit cache's scan time against f16's is
	// what the memory allows.
	for _, c := range []*CaseResult{dec, dec8} {
		sc := c.Scan
		if sc == nil || sc.M.Amount != float64(c.KVBytes) || len(sc.Tried) != len(scanTries) || sc.Rate.N != 3 || sc.Items != 2*2 ||
			!near(c.Ratios["paged_scan"], c.Rate.Median/sc.Rate.Median) {
			t.Fatalf("%s: paged scan %+v, ratios %v", c.Name, sc, c.Ratios)
		}
	}
	// Beside each scan, the decode's multiply-adds at the FMA peak: 2 x
	// (d_qk + d_v) x qo heads per cached position.
	for _, c := range []*CaseResult{dec, dec8} {
		ms := 1e3 * float64(2*100*2*(32+32)*4) / (1e9 * r.Yard.Peak().M.Rate().Median)
		if f := c.FMAFloor; f == nil || c.Flops != 2*100*2*(32+32)*4 || !near(f.MS, ms) || !near(f.OfScan, ms/c.Scan.TimeMS.Median) {
			t.Errorf("%s: flops %v, fma floor %+v, want %v ms", c.Name, c.Flops, f, ms)
		}
	}
	if pre.FMAFloor != nil {
		t.Errorf("prefill with an fma floor: %+v", pre.FMAFloor)
	}
	if !strings.Contains(out.String(), "multiply-adds at the fma peak ") {
		t.Errorf("the table does not show the decodes' fma floor")
	}
	if v := dec8.VsCache; v == nil || !near(v.ScanTime, dec8.Scan.TimeMS.Median/dec.Scan.TimeMS.Median) {
		t.Errorf("8-bit vs f16: %+v", v)
	}
	if pre.Scan != nil {
		t.Errorf("prefill with a paged scan: %+v", pre.Scan)
	}
	if dec.Name != "decode f16" || dec.RatioTo != "stream_read" || dec.Unit != "GB/s" || dec.KVBytes != 2*100*2*64*2 || dec.M.Amount != float64(dec.KVBytes) ||
		dec.PageSets < 2 || dec.PoolBytes < 1<<20 || dec.Batch != 2 || dec.QLen != 1 || dec.KVLen != 100 {
		t.Errorf("decode: %+v", dec)
	}
	if pre.Name != "prefill f32" || pre.RatioTo != "fma_peak" || pre.Unit != "GFLOP/s" || pre.Flops != 2*2*32*40*41/2*4 || pre.PageSets != 1 || pre.QLen != 40 {
		t.Errorf("prefill: %+v", pre)
	}
	for _, c := range r.Cases {
		if c.Rate.N != 3 || c.Ratio <= 0 || c.Ratio != c.Ratios[c.RatioTo] || !near(c.Ratio, c.Rate.Median/yardMedian(r.Yard, c.RatioTo)) ||
			!near(c.RatioBest, c.Rate.Max/yardBest(r.Yard, c.RatioTo)) {
			t.Errorf("%s: rate %+v ratio %v ratios %v", c.Name, c.Rate, c.Ratio, c.Ratios)
		}
	}
	if !strings.Contains(r.Skipped[0].Reason, `unknown kv_dtype "fp4"`) || r.Skipped[0].Name != "decode f16/fp4" {
		t.Errorf("skipped: %+v", r.Skipped)
	}
	for _, want := range []string{"stream read, 2 MiB contiguous", "the same, prefetching 256 B ahead", "256 B blocks in random order", "fp32 fma, " + r.Yard.ReadLevel.MCPU,
		"\ndecode f16 ", "\ndecode f16/e4m3 ", "\nprefill f32 ", "skip decode f16/fp4: ", "stream read (", "fma peak (",
		" ratio   best   scan  of", "paged scan ", "their paged scans "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var back CPUReport
	if err := json.Unmarshal(b, &back); err != nil || len(back.Cases) != 3 || back.Cases[0].Ratio != dec.Ratio || back.Yard.Summary != r.Yard.Summary {
		t.Errorf("JSON round trip: %v", err)
	}
}

func yardBest(y *Yardsticks, name string) float64 {
	if name == "stream_read" {
		return y.Read.Rate().Max
	}
	return y.Peak().M.Rate().Max
}

func yardMedian(y *Yardsticks, name string) float64 {
	if name == "stream_read" {
		return y.Read.Rate().Median
	}
	return y.Peak().M.Rate().Median
}

// An 8-bit cache's decode is timed against the same run's decode of the
// same queries and shape over a cache of the query dtype, and only that
// one: another query dtype, shape or role is no baseline.
func TestCacheRatios(t *testing.T) {
	mk := func(name, dt, kv string, kvLen int, ms ...float64) *CaseResult {
		c := &CaseResult{Name: name, Role: "decode", DType: dt, KVDType: kv, QOHeads: 32, KVHeads: 8, HeadDimQK: 128, HeadDimV: 128,
			PageSize: 16, Mask: "causal", Batch: 8, QLen: 1, KVLen: kvLen, Threads: 2}
		c.TimeMS = Stats{N: 3, Median: ms[0], Min: ms[1]}
		return c
	}
	e4m3 := mk("decode f16/e4m3", "f16", "e4m3", 4096, 5, 4)  // before its baseline in the run
	f32 := mk("decode f32", "f32", "", 4096, 40, 30)          // other queries
	short := mk("decode f16 short", "f16", "", 1024, 2, 1)    // other shape
	f16 := mk("decode f16", "f16", "", 4096, 8, 5)            // the baseline
	f16again := mk("decode f16 again", "f16", "", 4096, 1, 1) // a later one: the first counts
	i8 := mk("decode f16/i8", "f16", "i8", 4096, 6, 5)        // above the bar
	bf := mk("decode bf16/e5m2", "bf16", "e5m2", 4096, 3, 2)  // no bf16 cache in the run
	pre := mk("prefill f16/e4m3", "f16", "e4m3", 4096, 9, 9)  // not a decode
	pre.Role = "prefill"
	cases := []*CaseResult{e4m3, f32, short, f16, f16again, i8, bf, pre}
	setCacheRatios(cases)
	if v := e4m3.VsCache; v == nil || v.Case != "decode f16" || v.CacheDType != "f16" || v.CaseMS != 8 || !near(v.Time, 5.0/8) || !near(v.TimeBest, 4.0/5) {
		t.Errorf("e4m3: %+v", v)
	}
	if v := i8.VsCache; v == nil || v.Case != "decode f16" || !near(v.Time, 6.0/8) {
		t.Errorf("i8: %+v", v)
	}
	for _, c := range []*CaseResult{f32, short, f16, f16again, bf, pre} {
		if c.VsCache != nil {
			t.Errorf("%s: %+v", c.Name, c.VsCache)
		}
	}
	var out strings.Builder
	(&CPUReport{Cases: cases}).writeCacheRatios(&out)
	t.Logf("\n%s", out.String())
	for _, want := range []string{"(goal: at most 0.60×)",
		"decode f16/e4m3    8x4096 32/8 d128 p16           time vs f16 cache: 0.62× (median 5.000 / 8.000 ms of decode f16; best 0.80×), above the bar",
		"decode f16/i8      8x4096 32/8 d128 p16           time vs f16 cache: 0.75×",
		"decode bf16/e5m2   8x4096 32/8 d128 p16           no decode bf16 over a bf16 cache of this shape in this run"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	e4m3.TimeMS.Median = 4.8
	setCacheRatios(cases)
	out.Reset()
	(&CPUReport{Cases: cases}).writeCacheRatios(&out)
	if !strings.Contains(out.String(), "time vs f16 cache: 0.60× (median 4.800 / 8.000 ms of decode f16; best 0.80×), within the bar") {
		t.Errorf("at the bar:\n%s", out.String())
	}
	if strings.Contains(out.String(), "prefill") || strings.Contains(out.String(), "paged scans") {
		t.Errorf("a prefill row, or scans without scans:\n%s", out.String())
	}
	// With paged scans on both sides: their time ratio beside.
	e4m3.Scan, f16.Scan = &PagedScan{TimeMS: Stats{Median: 2.2}}, &PagedScan{TimeMS: Stats{Median: 4}}
	setCacheRatios(cases)
	if v := e4m3.VsCache; !near(v.ScanTime, 0.55) || i8.VsCache.ScanTime != 0 {
		t.Errorf("scan time ratios %+v %+v", v, i8.VsCache)
	}
	out.Reset()
	(&CPUReport{Cases: cases}).writeCacheRatios(&out)
	if !strings.Contains(out.String(), "time vs f16 cache: 0.60× (median 4.800 / 8.000 ms of decode f16; best 0.80×; their paged scans 0.55×, what the memory allows), within the bar") {
		t.Errorf("with scans:\n%s", out.String())
	}
	e4m3.Scan, f16.Scan = nil, nil
	setCacheRatios(cases)
	b, err := json.Marshal(e4m3)
	if err != nil || !strings.Contains(string(b), `"kv_dtype":"e4m3"`) || !strings.Contains(string(b), `"vs_cache":{"case":"decode f16","cache_dtype":"f16","case_ms":8,"time":0.6,"time_best":0.8}`) {
		t.Errorf("JSON %s, %v", b, err)
	}
	if b, _ := json.Marshal(f16); strings.Contains(string(b), "vs_cache") || strings.Contains(string(b), "kv_dtype") {
		t.Errorf("JSON of a 16-bit cache case: %s", b)
	}
}
