package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
)

// CPUOptions are the settings of a CPU bench run.
type CPUOptions struct {
	Threads     int    // kernel and yardstick threads (0: the kernels' default, all online CPUs)
	Batch       int    // decode: sequences (default 8)
	KVLen       int    // decode: cached tokens per sequence (default 4096)
	QLen        int    // prefill: q_len = kv_len of its one sequence (default 2048)
	PoolBytes   int64  // decode: least K+V pool size (default 1 GiB; at least twice one call's pages)
	StreamBytes int64  // read yardstick buffer (0: max(1 GiB, 8 x LLC))
	BlockBytes  int64  // scattered read block (default 32 KiB: one 16-token page of 8 KV heads x 128 16-bit values)
	Budget      Budget // repetitions of every measurement (default: 1 second each)
	Seed        int64  // random inputs and orders
	Dir         string // where kernels and yardsticks are built (default: a temporary directory)
	Version     string // attnc version, for the report
	// CPULevels restricts the CPU levels the kernels are cloned for
	// (conformance.Options.CPULevels; nil: every level, the best this
	// CPU runs, or the one $ATTNC_CPU_LEVEL names, timed).
	CPULevels []string
	// Out receives the table as the run goes (nil: nothing is printed).
	Out io.Writer
}

func (o CPUOptions) withDefaults() CPUOptions {
	if o.Batch == 0 {
		o.Batch = 8
	}
	if o.KVLen == 0 {
		o.KVLen = 4096
	}
	if o.QLen == 0 {
		o.QLen = 2048
	}
	if o.PoolBytes == 0 {
		o.PoolBytes = 1 << 30
	}
	if o.BlockBytes == 0 {
		o.BlockBytes = 32 << 10
	}
	if o.Budget.Reps == 0 && o.Budget.Seconds == 0 {
		o.Budget.Seconds = 1
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// CPUReport is a CPU bench run: the machine, its yardsticks, and every
// case with its ratio to them.
type CPUReport struct {
	Schema      string        `json:"schema"` // "attnc-bench/1"
	Version     string        `json:"attnc_version,omitempty"`
	Started     string        `json:"started"` // RFC 3339
	Machine     *Machine      `json:"machine"`
	LoadStart   [3]float64    `json:"load_start"` // 1, 5, 15 minute load averages
	LoadEnd     [3]float64    `json:"load_end"`
	Threads     int           `json:"threads"`
	KernelMCPU  string        `json:"kernel_mcpu"`  // opt/llc flags of the kernels (cpurt.CPUFlags; none: each CPU level's clone compiles for its level)
	KernelLevel Level         `json:"kernel_level"` // the CPU level the kernels dispatched to (<prefix>_cpu_level)
	Budget      Budget        `json:"budget"`
	Yard        *Yardsticks   `json:"yardsticks"`
	Cases       []*CaseResult `json:"cases"`
	Skipped     []Skip        `json:"skipped,omitempty"`
	Failed      []Skip        `json:"failed,omitempty"`
}

// Skip is a case that did not run, and why.
type Skip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// CaseResult is one measured entry.
type CaseResult struct {
	Name    string `json:"name"`
	Variant string `json:"variant"`
	Role    string `json:"role"`
	DType   string `json:"dtype"`
	// KVDType is the 8-bit K/V storage (e4m3, e5m2, i8); empty: K/V are
	// stored as DType.
	KVDType string `json:"kv_dtype,omitempty"`
	// Level is the CPU level the case's entries ran at (its library's
	// <prefix>_cpu_level), where it differs from the report's
	// KernelLevel: x86-64-v4-bf16 exists only in the libraries whose
	// prefill Q·Kᵀ reads exact bf16 operands.
	Level     string `json:"level,omitempty"`
	QOHeads   int    `json:"qo_heads"`
	KVHeads   int    `json:"kv_heads"`
	HeadDimQK int    `json:"head_dim_qk"`
	HeadDimV  int    `json:"head_dim_v"`
	PageSize  int    `json:"page_size"`
	Mask      string `json:"mask"`
	Batch     int    `json:"batch"`
	QLen      int    `json:"q_len"`  // per sequence
	KVLen     int    `json:"kv_len"` // per sequence
	Threads   int    `json:"threads"`
	// KVBytes is the K+V bytes one call reads, as stored: decode, the rows
	// its queries see; prefill, every cached row.
	KVBytes int64 `json:"kv_bytes"`
	// Flops counts 2 (multiply, add) x (d_qk + d_v) per visible (query,
	// kv) pair per qo head: causal prefill 2*2*d*L(L+1)/2*heads.
	Flops float64 `json:"flops"`
	// Exact is false when the mask's visibility depends on run-time tables
	// (tree, custom): Flops and KVBytes then count causal pairs, a bound.
	Exact     bool    `json:"exact"`
	PoolBytes int64   `json:"pool_bytes"` // K+V pool the page tables point into
	PageSets  int     `json:"page_sets"`  // disjoint page tables the calls rotate through
	Unit      string  `json:"unit"`       // GB/s (decode) or GFLOP/s (prefill)
	M         Measure `json:"m"`          // Amount: KVBytes (decode) or Flops (prefill)
	Rate      Stats   `json:"rate"`       // in Unit
	TimeMS    Stats   `json:"time_ms"`    // per call
	// Ratio is the median rate over the yardstick's median (RatioTo):
	// decode against the contiguous stream read, prefill against the FMA
	// peak. Ratios holds it with the others: decode also against the
	// prefetching and the scattered reads and against its paged-read scan
	// ("paged_scan"), prefill also against the FMA loop at the kernels' own
	// level.
	Ratio   float64            `json:"ratio"`
	RatioTo string             `json:"ratio_to"`
	Ratios  map[string]float64 `json:"ratios"`
	// RatioBest is the best rate over the yardstick's best: what each
	// reached at its fastest. On a busy machine a yardstick with many
	// short repetitions catches a quiet moment more often than a case
	// with a few long ones, so Ratio is the one to quote.
	RatioBest float64 `json:"ratio_best"`
	// VsCache, for a decode over an 8-bit cache, compares its time with
	// the same run's decode of the same queries and shape over a cache of
	// the queries' dtype (the goal: at most CacheTimeBar); nil when the run
	// has no such case.
	VsCache *CacheRatio `json:"vs_cache,omitempty"`
	// Scan, for a decode, is its paged-read yardstick: the same pages read
	// with no compute (Ratios["paged_scan"]: the median rate over the
	// scan's).
	Scan *PagedScan `json:"paged_scan,omitempty"`
	// FirstMS, for a decode measured beside its paged scan, is the time
	// per call of each round's first call, made after the scans, when the
	// kernels' pool workers have gone to sleep; TimeMS is the round's
	// second call, which finds them awake as back-to-back calls do.
	FirstMS *Stats `json:"first_ms,omitempty"`
	// FMAFloor, for a decode with a paged scan and an FMA peak, is the
	// time its multiply-adds (Flops) take at the in-run FMA peak, alone
	// and as a fraction of the scan's median time: the arithmetic's limit
	// beside the memory's. Where it comes near 1 the decode cannot reach
	// its scan on this machine with f32 multiply-adds, however well the
	// reads overlap them.
	FMAFloor *FMAFloor `json:"fma_floor,omitempty"`

	// HugePages says whether the decode pools were advised MADV_HUGEPAGE,
	// and the host's THP mode ("advised, THP madvise"); AnonHugeBytes is
	// the process's AnonHugePages once they were filled
	// (/proc/self/smaps_rollup; 0 where unreadable): what the kernel granted.
	HugePages     string `json:"huge_pages,omitempty"`
	AnonHugeBytes int64  `json:"anon_huge_bytes,omitempty"`
}

// FMAFloor is a decode's multiply-adds at the FMA peak (CaseResult.FMAFloor).
type FMAFloor struct {
	MS     float64 `json:"ms"`      // Flops at the peak's median rate
	OfScan float64 `json:"of_scan"` // MS over the paged scan's median time
}

// CacheTimeBar is the goal for 8-bit caches: a decode over an 8-bit cache takes at
// most this fraction of the time of the same decode over an f16 (bf16)
// cache, measured in the same run.
const CacheTimeBar = 0.6

// CacheRatio is an 8-bit cache decode's time against Case's, the same
// queries and shape over a CacheDType cache in the same run.
type CacheRatio struct {
	Case       string  `json:"case"`
	CacheDType string  `json:"cache_dtype"`
	CaseMS     float64 `json:"case_ms"`   // Case's median time per call
	Time       float64 `json:"time"`      // median time over Case's median time
	TimeBest   float64 `json:"time_best"` // fastest time over Case's fastest
	// ScanTime is the paged-read scans' time ratio, this case's scan over
	// Case's (medians): the time ratio the memory allows (0 when either
	// has no scan).
	ScanTime float64 `json:"scan_time,omitempty"`
}

// sameCall reports whether a and b time the same role, queries and shape
// (only the K/V storage may differ).
func sameCall(a, b *CaseResult) bool {
	return a.Role == b.Role && a.DType == b.DType && a.QOHeads == b.QOHeads && a.KVHeads == b.KVHeads &&
		a.HeadDimQK == b.HeadDimQK && a.HeadDimV == b.HeadDimV && a.PageSize == b.PageSize && a.Mask == b.Mask &&
		a.Batch == b.Batch && a.QLen == b.QLen && a.KVLen == b.KVLen && a.Threads == b.Threads
}

// setCacheRatios fills VsCache for every decode over an 8-bit cache that
// has a decode over a cache of its query dtype among cases (the first).
func setCacheRatios(cases []*CaseResult) {
	for _, c := range cases {
		c.VsCache = nil
		if c.Role != string(ir.RoleDecode) || c.KVDType == "" {
			continue
		}
		for _, b := range cases {
			if b.KVDType == "" && sameCall(c, b) {
				c.VsCache = &CacheRatio{Case: b.Name, CacheDType: b.DType, CaseMS: b.TimeMS.Median,
					Time: ratio(c.TimeMS.Median, b.TimeMS.Median), TimeBest: ratio(c.TimeMS.Min, b.TimeMS.Min)}
				if c.Scan != nil && b.Scan != nil {
					c.VsCache.ScanTime = ratio(c.Scan.TimeMS.Median, b.Scan.TimeMS.Median)
				}
				break
			}
		}
	}
}

// RunCPU builds the plan's variants for the CPU, measures the machine
// yardsticks on the kernels' thread count, then every case, printing the
// table to o.Out as it goes. A variant that fails to build or a case that
// fails is recorded in Failed (and not printed) and the run goes on; a
// variant that does not generate kernels yet is printed as skipped. A
// buffer the system will not map (out of memory, ulimit -v) fails its case
// or, for a yardstick, the run, with an error.
func RunCPU(p *Plan, o CPUOptions) (_ *CPUReport, err error) {
	defer cpurt.RecoverAlloc(&err)
	o = o.withDefaults()
	if o.Batch < 1 || o.KVLen < 1 || o.QLen < 1 || o.Threads < 0 || o.PoolBytes < 0 || o.StreamBytes < 0 || o.BlockBytes < 0 {
		return nil, fmt.Errorf("bench: bad options %+v", o)
	}
	dir := o.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "attnc-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	m := ReadMachine()
	r := &CPUReport{Schema: "attnc-bench/1", Version: o.Version, Started: time.Now().UTC().Format(time.RFC3339),
		Machine: m, LoadStart: LoadAvg(), Budget: o.Budget, KernelMCPU: strings.Join(cpurt.CPUFlags(), " ")}

	// Build every variant first: the kernels' thread count sets the
	// yardsticks'.
	suites := make([]*conformance.Suite, len(p.Variants))
	errs := make([]error, len(p.Variants))
	defer func() {
		for _, s := range suites {
			if s != nil {
				s.Close()
			}
		}
	}()
	for i, pv := range p.Variants {
		switch {
		case pv.Err != nil:
			errs[i] = pv.Err
		case lower.Unsupported(pv.Variant) != nil:
			errs[i] = lower.Unsupported(pv.Variant)
		default:
			vdir := filepath.Join(dir, fmt.Sprintf("%02d-%s", i, pv.Variant.Name))
			if err := os.MkdirAll(vdir, 0o755); err != nil {
				return nil, err
			}
			s, err := conformance.BuildWith(pv.Variant, vdir, conformance.Options{CPULevels: o.CPULevels})
			if err != nil {
				errs[i] = fmt.Errorf("build: %w", err)
				r.Failed = append(r.Failed, Skip{Name: pv.Variant.Name, Reason: errs[i].Error()})
				continue
			}
			suites[i] = s
		}
	}
	r.Threads = o.Threads
	if r.Threads == 0 {
		r.Threads = runtime.NumCPU()
	}
	for _, s := range suites {
		if s == nil {
			continue
		}
		if err := s.SetThreads(o.Threads); err != nil {
			return nil, err
		}
		n, err := s.Lib.Call(s.Prefix + "_get_num_threads")
		if err != nil {
			return nil, err
		}
		r.Threads = int(n)
		// The level the entries run: the best this CPU supports, or
		// $ATTNC_CPU_LEVEL (a refused one fails every case).
		r.KernelLevel = m.LevelOf([]string{"-mcpu=" + s.Lib.CallStr(s.Prefix+"_cpu_level", 0)})
		break
	}

	ydir := filepath.Join(dir, "yardsticks")
	if err := os.MkdirAll(ydir, 0o755); err != nil {
		return nil, err
	}
	y, readLib, err := measureYardsticks(YardOptions{Threads: r.Threads, StreamBytes: o.StreamBytes, BlockBytes: o.BlockBytes,
		Budget: o.Budget, Seed: o.Seed, Dir: ydir, Machine: m})
	if err != nil {
		return nil, err
	}
	defer readLib.close()
	r.Yard = y
	r.writeHeader(o.Out)
	r.writeYardsticks(o.Out)
	writeCaseHeader(o.Out)

	for _, pc := range p.Cases {
		s, pv := suites[pc.Variant], p.Variants[pc.Variant]
		if s == nil {
			if pv.Err != nil || pv.Variant == nil || lower.Unsupported(pv.Variant) != nil {
				r.Skipped = append(r.Skipped, Skip{Name: pc.Name, Reason: errs[pc.Variant].Error()})
				fmt.Fprintf(o.Out, "skip %s: %v\n", pc.Name, errs[pc.Variant])
			}
			continue // a build failure is already in Failed
		}
		c, err := runCase(s, pc, o, r.Threads, m, y, readLib)
		if err != nil {
			r.Failed = append(r.Failed, Skip{Name: pc.Name, Reason: err.Error()})
			continue
		}
		if c.Level == r.KernelLevel.MCPU {
			c.Level = ""
		}
		r.Cases = append(r.Cases, c)
		writeCase(o.Out, c)
	}
	setCacheRatios(r.Cases)
	r.writeCacheRatios(o.Out)
	r.LoadEnd = LoadAvg()
	r.writeFooter(o.Out)
	return r, nil
}

// runCase measures one planned case; a buffer that cannot be mapped is
// its error.
func runCase(s *conformance.Suite, pc PlannedCase, o CPUOptions, threads int, m *Machine, y *Yardsticks, scanLib *yardLib) (_ *CaseResult, err error) {
	defer cpurt.RecoverAlloc(&err)
	v := s.V
	if err := s.SetThreads(o.Threads); err != nil {
		return nil, err
	}
	sh, minPool := prefillCall(o.QLen), int64(0)
	if pc.Role == ir.RoleDecode {
		sh, minPool = decodeCall(o.Batch, o.KVLen), o.PoolBytes
	}
	w, err := newPoolWorkload(s, pc.Role, sh, minPool, m.MemAvail, threads, o.Seed)
	if err != nil {
		return nil, err
	}
	defer w.free()
	var sc *pagedScan
	if pc.Role == ir.RoleDecode && scanLib != nil {
		if sc, err = newPagedScan(w, threads); err != nil {
			return nil, err
		}
		defer sc.free()
		if sc.bytes != w.kvBytes {
			return nil, fmt.Errorf("paged scan: plans %d bytes, the case reads %d", sc.bytes, w.kvBytes)
		}
	}
	w.dropCase()
	c := &CaseResult{Name: pc.Name, Variant: v.Name, Role: string(pc.Role), DType: v.DType.String(), KVDType: kvDTypeText(v),
		QOHeads: v.QOHeads, KVHeads: v.KVHeads, HeadDimQK: v.HeadDimQK, HeadDimV: v.HeadDimV, PageSize: v.PageSize,
		Mask: maskText(v), Batch: len(sh.qLens), QLen: sh.qLens[0], KVLen: sh.kvLens[0], Threads: threads,
		KVBytes: w.kvBytes, Flops: w.flops, Exact: w.exact,
		PoolBytes: int64(w.poolPages) * w.pageBytes, PageSets: len(w.tables)}
	if w.huge != "" {
		c.HugePages = w.huge + ", THP " + thpMode()
		c.AnonHugeBytes = anonHugeBytes()
	}
	if s.Lib != nil {
		c.Level = s.Lib.CallStr(s.Prefix+"_cpu_level", 0)
	}
	c.M.Amount, c.Unit = c.Flops, "GFLOP/s"
	if pc.Role == ir.RoleDecode {
		c.M.Amount, c.Unit = float64(c.KVBytes), "GB/s"
	}
	if sc != nil {
		// The decode's calls alternate with its scan's, so the ratio
		// between them holds while the memory's load moves.
		var first []float64
		if c.Scan, c.M.Seconds, first, err = scanLib.measureScan(sc, threads, o.Budget, w.timedCall); err != nil {
			return nil, err
		}
		if err := w.checkOutput(); err != nil {
			return nil, err
		}
		f := Measure{Seconds: first}.TimeMS()
		c.FirstMS = &f
	} else if c.M.Seconds, err = w.measure(o.Budget); err != nil {
		return nil, err
	}
	c.setRatios(y)
	return c, nil
}

// setRatios fills Rate, TimeMS and the ratios to the yardsticks.
func (c *CaseResult) setRatios(y *Yardsticks) {
	c.Rate = c.M.Rate()
	c.TimeMS = c.M.TimeMS()
	c.Ratios = map[string]float64{}
	if y == nil {
		return
	}
	if c.Role == string(ir.RoleDecode) {
		c.RatioTo = "stream_read"
		c.Ratios["stream_read"] = ratio(c.Rate.Median, y.Read.Rate().Median)
		c.Ratios["stream_read_prefetch"] = ratio(c.Rate.Median, y.ReadPrefetch.Rate().Median)
		c.Ratios["scattered_read"] = ratio(c.Rate.Median, y.Blocks.Rate().Median)
		c.Ratios["scattered_read_prefetch"] = ratio(c.Rate.Median, y.BlocksPrefetch.Rate().Median)
		if c.Scan != nil {
			c.Ratios["paged_scan"] = ratio(c.Rate.Median, c.Scan.Rate.Median)
		}
		c.RatioBest = ratio(c.Rate.Max, y.Read.Rate().Max)
		if p := y.Peak(); p != nil && c.Scan != nil && p.M.Rate().Median > 0 {
			ms := 1e3 * c.Flops / (1e9 * p.M.Rate().Median)
			c.FMAFloor = &FMAFloor{MS: ms, OfScan: ratio(ms, c.Scan.TimeMS.Median)}
		}
	} else {
		c.RatioTo = "fma_peak"
		if p := y.Peak(); p != nil {
			c.Ratios["fma_peak"] = ratio(c.Rate.Median, p.M.Rate().Median)
			c.RatioBest = ratio(c.Rate.Max, p.M.Rate().Max)
		}
		for _, f := range y.FMA {
			c.Ratios["fma_"+f.Level.MCPU] = ratio(c.Rate.Median, f.M.Rate().Median)
		}
	}
	c.Ratio = c.Ratios[c.RatioTo]
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// kvDTypeText is the variant's 8-bit kv_dtype, or "" when K/V are stored
// as its dtype.
func kvDTypeText(v *ir.Variant) string {
	if !v.Quantized() {
		return ""
	}
	return v.KVDType.String()
}

// maskText is the variant's mask and sinks, spec style.
func maskText(v *ir.Variant) string {
	var parts []string
	for _, m := range v.Masks {
		if m.Kind == ir.MaskWindow {
			parts = append(parts, fmt.Sprintf("window(left = %d)", m.Left))
		} else {
			parts = append(parts, m.Kind.String())
		}
	}
	s := strings.Join(parts, ", ")
	if v.Sinks != nil {
		if v.Sinks.Kind == ir.SinkTokens {
			s += fmt.Sprintf(" + sinks tokens(%d)", v.Sinks.Tokens)
		} else {
			s += " + sinks learned"
		}
	}
	return s
}

// thpMode is the host's transparent huge page mode (always, madvise or
// never: the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled),
// "unknown" where unreadable.
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown"
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return "unknown"
	}
	return s[i+1 : j]
}

// anonHugeBytes is the process's AnonHugePages (/proc/self/smaps_rollup),
// 0 where unreadable.
func anonHugeBytes() int64 {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "AnonHugePages:" && f[2] == "kB" {
			var kb int64
			if _, err := fmt.Sscan(f[1], &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
