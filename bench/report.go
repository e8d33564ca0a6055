package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// mib prints a byte count in MiB (KiB below one MiB, bytes below one KiB).
func mib(n int64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

func (r *CPUReport) writeHeader(w io.Writer) {
	m := r.Machine
	cpu := m.Model
	if cpu == "" {
		cpu = m.Arch
	}
	if m.Family != 0 {
		cpu += fmt.Sprintf(" (family %d, model %d)", m.Family, m.ModelID)
	}
	fmt.Fprintf(w, "attnc bench: %s, %d threads of %d CPUs, LLC %s, load %.2f %.2f %.2f\n",
		cpu, r.Threads, m.OnlineCPUs, mib(m.LLCBytes), r.LoadStart[0], r.LoadStart[1], r.LoadStart[2])
	budget := fmt.Sprintf("%d repetitions", r.Budget.Reps)
	if r.Budget.Reps == 0 {
		budget = fmt.Sprintf("%g s and at least %d repetitions", r.Budget.Seconds, MinReps)
	}
	flags := r.KernelMCPU
	if flags == "" {
		flags = "no -mcpu"
	}
	fmt.Fprintf(w, "kernels: CPU level %s (%s; %s); yardsticks: -mcpu=%s (%s) and the lower levels with FMA; each row: %s\n",
		r.KernelLevel.MCPU, r.KernelLevel.Name, flags, r.Yard.ReadLevel.MCPU, r.Yard.ReadLevel.Name, budget)
}

const statCols = "%10s %9s %9s %9s %9s %5s  %s\n"

func statRow(w io.Writer, name string, s Stats, unit string) {
	f := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	fmt.Fprintf(w, "%-44s "+statCols, name, f(s.Median), f(s.P25), f(s.P75), f(s.Min), f(s.Max), fmt.Sprint(s.N), unit)
}

func (r *CPUReport) writeYardsticks(w io.Writer) {
	y := r.Yard
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-44s "+statCols, "yardstick", "median", "p25", "p75", "min", "max", "reps", "unit")
	note := ""
	if y.StreamNote != "" {
		note = " (" + y.StreamNote + ")"
	}
	statRow(w, "stream read, "+mib(y.StreamBytes)+" contiguous"+note, y.Read.Rate(), "GB/s")
	statRow(w, "  the same, prefetching "+mib(y.BlockBytes)+" ahead", y.ReadPrefetch.Rate(), "GB/s")
	statRow(w, "stream read, "+mib(y.BlockBytes)+" blocks in random order", y.Blocks.Rate(), "GB/s")
	statRow(w, "  the same, prefetching the next block", y.BlocksPrefetch.Rate(), "GB/s")
	for _, f := range y.FMA {
		statRow(w, fmt.Sprintf("fp32 fma, %s (%s), %d chains", f.Level.MCPU, f.Level.Name, f.Chains), f.M.Rate(), "GFLOP/s")
	}
	if y.Clock.Amount > 0 {
		statRow(w, "clock (dependent multiplies), per thread", y.Clock.Rate(), "GHz")
		statRow(w, "  checked by dependent adds, per thread", y.ClockAdds.Rate(), "GHz")
		if !y.ClockAgrees() {
			fmt.Fprintf(w, "clock: the chains disagree (best %.2f and %.2f GHz): no clock or flop/cycle for this core\n", y.Clock.Rate().Max, y.ClockAdds.Rate().Max)
		}
	}
	if p := y.Peak(); p != nil {
		fmt.Fprintf(w, "fma peak: %s, %.2f GFLOP/s", p.Level.MCPU, p.M.Rate().Median)
		if fc := y.FlopsPerCycle(); fc > 0 {
			fmt.Fprintf(w, "; best: %.1f flop/cycle/thread at %.2f GHz", fc, y.Clock.Rate().Max)
		}
		fmt.Fprintln(w)
	}
}

const caseCols = "%-18s %-30s %9s %9s %9s %9s %5s %-8s %6s %6s %6s  %s\n"

func writeCaseHeader(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, caseCols, "case", "shape", "ms", "rate", "p25", "p75", "reps", "unit", "ratio", "best", "scan", "of (and others)")
}

// shapeText is a case's call shape, short.
func (c *CaseResult) shapeText() string {
	heads := fmt.Sprintf("%d/%d d%d p%d", c.QOHeads, c.KVHeads, c.HeadDimQK, c.PageSize)
	if c.HeadDimV != c.HeadDimQK {
		heads = fmt.Sprintf("%d/%d d%d/%d p%d", c.QOHeads, c.KVHeads, c.HeadDimQK, c.HeadDimV, c.PageSize)
	}
	if c.Role == "decode" {
		return fmt.Sprintf("%dx%d %s", c.Batch, c.KVLen, heads)
	}
	return fmt.Sprintf("%d %s %s", c.QLen, strings.Fields(c.Mask + " ")[0], heads)
}

func writeCase(w io.Writer, c *CaseResult) {
	f := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	var also []string
	if c.Role == "decode" {
		also = append(also, fmt.Sprintf("%.3f scattered+prefetch", c.Ratios["scattered_read_prefetch"]))
		also = append(also, fmt.Sprintf("pool %s, %d page sets", mib(c.PoolBytes), c.PageSets))
		if c.HugePages != "" {
			also = append(also, fmt.Sprintf("huge pages %s, %s of AnonHugePages", c.HugePages, mib(c.AnonHugeBytes)))
		}
		if c.Scan != nil {
			also = append(also, fmt.Sprintf("paged scan %.2f GB/s, %s", c.Scan.Rate.Median, aheadText(c.Scan.Ahead, c.Scan.L2)))
		}
		if c.FirstMS != nil {
			also = append(also, fmt.Sprintf("first call after the scans %.3f ms", c.FirstMS.Median))
		}
		if c.FMAFloor != nil {
			also = append(also, fmt.Sprintf("multiply-adds at the fma peak %.3f ms, %.2f of the scan's time", c.FMAFloor.MS, c.FMAFloor.OfScan))
		}
	} else {
		for k, x := range c.Ratios {
			if k != c.RatioTo && strings.HasPrefix(k, "fma_") {
				also = append(also, fmt.Sprintf("%.3f %s", x, strings.TrimPrefix(k, "fma_")))
			}
		}
	}
	if !c.Exact {
		also = append(also, "counted as causal (mask depends on run-time tables)")
	}
	if c.Level != "" {
		also = append(also, "kernels at "+c.Level)
	}
	of := strings.ReplaceAll(c.RatioTo, "_", " ")
	if len(also) > 0 {
		of += " (" + strings.Join(sortedStrings(also), "; ") + ")"
	}
	scan := "-"
	if c.Scan != nil {
		scan = fmt.Sprintf("%.3f", c.Ratios["paged_scan"])
	}
	fmt.Fprintf(w, caseCols, c.Name, c.shapeText(), fmt.Sprintf("%.3f", c.TimeMS.Median), f(c.Rate.Median), f(c.Rate.P25), f(c.Rate.P75),
		fmt.Sprint(c.Rate.N), c.Unit, fmt.Sprintf("%.3f", c.Ratio), fmt.Sprintf("%.3f", c.RatioBest), scan, of)
}

// aheadText is a paged scan's prefetch, in words.
func aheadText(n int, l2 bool) string {
	into := ""
	if l2 {
		into = " into L2"
	}
	switch n {
	case 0:
		return "no prefetch"
	case 1:
		return "prefetch 1 page ahead" + into
	}
	return fmt.Sprintf("prefetch %d pages ahead%s", n, into)
}

func sortedStrings(xs []string) []string {
	out := append([]string(nil), xs...)
	sort.Strings(out)
	return out
}

// writeCacheRatios prints, for each decode over an 8-bit cache, its time
// against the same run's decode over a cache of its query dtype, beside
// the goal (CacheTimeBar).
func (r *CPUReport) writeCacheRatios(w io.Writer) {
	head := false
	for _, c := range r.Cases {
		if c.Role != "decode" || c.KVDType == "" {
			continue
		}
		if !head {
			fmt.Fprintf(w, "\n8-bit caches: decode time over the same decode (queries, shape) over a cache of the query dtype, this run (goal: at most %.2f×)\n", CacheTimeBar)
			head = true
		}
		if c.VsCache == nil {
			fmt.Fprintf(w, "%-18s %-30s no decode %s over a %s cache of this shape in this run\n", c.Name, c.shapeText(), c.DType, c.DType)
			continue
		}
		v := c.VsCache
		verdict := "within"
		if v.Time > CacheTimeBar {
			verdict = "above"
		}
		scan := ""
		if v.ScanTime > 0 {
			scan = fmt.Sprintf("; their paged scans %.2f×, what the memory allows", v.ScanTime)
		}
		fmt.Fprintf(w, "%-18s %-30s time vs %s cache: %.2f× (median %.3f / %.3f ms of %s; best %.2f×%s), %s the bar\n",
			c.Name, c.shapeText(), v.CacheDType, v.Time, c.TimeMS.Median, v.CaseMS, v.Case, v.TimeBest, scan, verdict)
	}
}

func (r *CPUReport) writeFooter(w io.Writer) {
	fmt.Fprintf(w, "\nload at the end: %.2f %.2f %.2f; %d cases, %d skipped, %d failed\n",
		r.LoadEnd[0], r.LoadEnd[1], r.LoadEnd[2], len(r.Cases), len(r.Skipped), len(r.Failed))
}

// WriteJSON writes the report to path as indented JSON.
func (r *CPUReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
