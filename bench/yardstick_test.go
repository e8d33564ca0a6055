package bench

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
)

// The yardstick loops compute what they claim: every byte read, every
// block once, every FMA chain iterated, every add counted.
func TestYardstickLoops(t *testing.T) {
	needTools(t)
	m := ReadMachine()
	for _, l := range m.Levels() {
		t.Run(l.MCPU, func(t *testing.T) {
			y, err := buildYardLib(l, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer y.close()
			out := newSlots(2)
			defer out.free()
			step := readUnroll * l.VectorBytes
			rb, err := newReadBuffer(int64(40*step+8), 2, step)
			if err != nil {
				t.Fatal(err)
			}
			defer rb.free()
			if rb.chunk != int64(20*step) || rb.bytes() != int64(40*step) {
				t.Fatalf("chunk %d, bytes %d", rb.chunk, rb.bytes())
			}
			if _, err := y.read(rb, out); err != nil {
				t.Fatal(err)
			}
			// A length that is not whole steps reads the whole steps only.
			words := wordsOf(rb.buf)
			var want int64
			for _, w := range words[:step/8] {
				want += w
			}
			if err := y.lib.CallVoid("yard_read", rb.buf.Ptr(), int64(step+step/2), out.ptr(0)); err != nil || out.i64(0) != want {
				t.Errorf("yard_read of 1.5 steps: %#x, want %#x (%v)", out.i64(0), want, err)
			}
			bo, err := newBlockOrder(rb, int64(2*step), 3)
			if err != nil {
				t.Fatal(err)
			}
			defer bo.free()
			seq, err := newBlockOrder(rb, int64(2*step), -1)
			if err != nil {
				t.Fatal(err)
			}
			defer seq.free()
			for i, off := range wordsOf(seq.offsets) {
				if off != int64(i*2*step) {
					t.Fatalf("address order: block %d at %d", i, off)
				}
			}
			for _, order := range []*blockOrder{bo, seq} {
				for _, ahead := range []int{0, 1, 5} {
					if _, err := y.readBlocks(rb, order, ahead, out); err != nil {
						t.Errorf("ahead %d: %v", ahead, err)
					}
				}
			}
			// A wrong expected sum is caught.
			rb.want[1]++
			if _, err := y.read(rb, out); err == nil || !strings.Contains(err.Error(), "thread 1") {
				t.Errorf("a wrong sum passed: %v", err)
			}
			rb.want[1]--

			// acc = acc*1 + 1 from k+2 (chain k): after n iterations k+2+n,
			// exactly, in every lane.
			params := cpurt.F32Buffer([]float32{1, 1})
			defer params.Free()
			const iters = 100
			if _, _, err := y.fma(2, iters, params, out); err != nil {
				t.Fatal(err)
			}
			want32 := 0.0
			for k := range y.accs {
				want32 += float64(k + 2 + iters)
			}
			want32 *= float64(l.VectorBytes / 4)
			for th := range 2 {
				if got := out.f32(th); float64(got) != want32 {
					t.Errorf("fma thread %d: %v, want %v", th, got, want32)
				}
			}
			if f := y.fmaFlops(10); f != 2*float64(l.VectorBytes/4)*float64(y.accs)*10 {
				t.Errorf("fmaFlops = %v", f)
			}
			if l.X86 {
				for _, fn := range []string{"yard_clock", "yard_clock_add"} {
					if _, _, err := y.clock(fn, 2, 1000, out); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
}

func TestMeasureYardsticks(t *testing.T) {
	needTools(t)
	y, err := MeasureYardsticks(YardOptions{Threads: 2, StreamBytes: 4 << 20, Budget: Budget{Reps: 2}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	levels := ReadMachine().Levels()
	if y.Threads != 2 || y.ReadLevel != levels[0] || y.StreamBytes != 4<<20 || y.BlockBytes != 32<<10 || len(y.FMA) != len(fmaLevels(levels)) {
		t.Errorf("yardsticks %+v", y)
	}
	for i, f := range y.FMA {
		if f.Level != fmaLevels(levels)[i] || (levels[0].FMA && !f.Level.FMA) {
			t.Errorf("fma %d at %+v", i, f.Level)
		}
	}
	for name, m := range map[string]Measure{"read": y.Read, "read+prefetch": y.ReadPrefetch, "blocks": y.Blocks, "blocks+prefetch": y.BlocksPrefetch, "fma": y.FMA[0].M} {
		if r := m.Rate(); r.N != 2 || r.Min <= 0 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if y.Read.Amount != 4<<20 || y.ReadPrefetch.Amount != 4<<20 || y.Blocks.Amount != 4<<20 {
		t.Errorf("read amounts %v %v", y.Read.Amount, y.Blocks.Amount)
	}
	if y.Peak() == nil || y.Summary.FMAPeakGFLOPS != y.Peak().M.Rate().Median || y.Summary.ReadGBps != y.Read.Rate().Median {
		t.Errorf("summary %+v", y.Summary)
	}
	if levels[0].X86 && (y.Clock.Rate().N != 2 || y.ClockAdds.Rate().N != 2 || y.Clock.Amount <= 0 || y.ClockAdds.Amount <= 0) {
		t.Errorf("clock %+v, adds %+v", y.Clock.Rate(), y.ClockAdds.Rate())
	}
	if _, err := MeasureYardsticks(YardOptions{Threads: 2, StreamBytes: 4 << 20, BlockBytes: 100, Budget: Budget{Reps: 1}, Dir: t.TempDir()}); err == nil {
		t.Errorf("a block that is not whole read steps: no error")
	}
	if _, err := MeasureYardsticks(YardOptions{Threads: 0, Dir: t.TempDir()}); err == nil {
		t.Errorf("no threads: no error")
	}
	small := &Machine{Arch: "amd64", Flags: map[string]bool{}, MemAvail: 8 << 20}
	if _, err := MeasureYardsticks(YardOptions{Threads: 1, StreamBytes: 7 << 20, Dir: t.TempDir(), Machine: small}); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("a stream buffer larger than memory: %v", err)
	}
}

// The clock is measured by a chain of dependent multiplies, 3 cycles each
// on every x86-64 core, and reported only where a chain of dependent adds
// agrees: a core that runs adds faster than one a cycle (Golden Cove folds
// an add of an immediate at rename: 22-24 "GHz") gives no clock rather
// than a wrong one. On this machine it is a plausible clock.
func TestClock(t *testing.T) {
	for _, c := range []struct {
		mul, add float64
		ok       bool
	}{{3.5, 3.5, true}, {3.5, 3.8, true}, {3.5, 3.2, true}, {3.5, 23, false}, {3.5, 5.9, false}, {2.1, 3.5, false}, {0, 3.5, false}, {3.5, 0, false}} {
		if got := clockAgrees(c.mul, c.add); got != c.ok {
			t.Errorf("clockAgrees(%v, %v) = %v", c.mul, c.add, got)
		}
	}
	y := &Yardsticks{FMA: []FMAResult{{M: Measure{Amount: 1e9, Seconds: []float64{1}}, CPU: Measure{Amount: 64e9, Seconds: []float64{1}}}},
		Clock: Measure{Amount: 3.5e9, Seconds: []float64{1}}, ClockAdds: Measure{Amount: 23e9, Seconds: []float64{1}}}
	if y.ClockAgrees() || y.FlopsPerCycle() != 0 {
		t.Errorf("disagreeing chains: flop/cycle %v", y.FlopsPerCycle())
	}
	var out strings.Builder
	(&CPUReport{Yard: y}).writeYardsticks(&out)
	if !strings.Contains(out.String(), "the chains disagree") || strings.Contains(out.String(), "flop/cycle/thread") {
		t.Errorf("table:\n%s", out.String())
	}
	y.ClockAdds.Amount = 3.6e9
	if !y.ClockAgrees() || !near(y.FlopsPerCycle(), 64/3.5) {
		t.Errorf("agreeing chains: flop/cycle %v", y.FlopsPerCycle())
	}

	needTools(t)
	levels := ReadMachine().Levels()
	if !levels[0].X86 {
		t.Skip("the clock chains are x86-64 inline assembly")
	}
	lib, err := buildYardLib(levels[0], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer lib.close()
	out2 := newSlots(1)
	defer out2.free()
	// Best of a few runs of about 10 ms over thread CPU time: a loaded
	// machine only slows a run down.
	best := map[string]float64{}
	for range 5 {
		for _, c := range []struct {
			fn     string
			cycles int64
		}{{"yard_clock", mulLatency}, {"yard_clock_add", 1}} {
			const iters = 30000
			_, cpu, err := lib.clock(c.fn, 1, iters, out2)
			if err != nil {
				t.Fatal(err)
			}
			if cpu > 0 {
				best[c.fn] = max(best[c.fn], float64(iters*clockOps*c.cycles)/cpu/1e9)
			}
		}
	}
	t.Logf("multiplies: %.2f GHz, adds: %.2f GHz", best["yard_clock"], best["yard_clock_add"])
	if g := best["yard_clock"]; g != 0 && (g < 0.5 || g > 7) {
		t.Errorf("clock %.2f GHz from the multiply chain: not a clock", g)
	}
}

// TestScanPrefetchLevels: yard_scan's l2 branch prefetches with locality
// 2 (prefetcht1), its other branch with locality 3 (prefetcht0); the sums
// the other tests check cannot tell the two apart.
func TestScanPrefetchLevels(t *testing.T) {
	text := yardstickIR(x86Levels[0].level, 24)
	body := func(name string) string {
		i := strings.Index(text, "@"+name+"(")
		if i < 0 {
			t.Fatalf("no @%s in the yardstick IR", name)
		}
		end := strings.Index(text[i:], "\n}\n")
		return text[i : i+end]
	}
	for _, c := range []struct{ fn, helper, locality string }{
		{"yard_pf", "", "i32 0, i32 3, i32 1"},
		{"yard_pf_l2", "", "i32 0, i32 2, i32 1"},
		{"yard_block_pf", "@yard_pf(", ""},
		{"yard_block_pf_l2", "@yard_pf_l2(", ""},
	} {
		b := body(c.fn)
		if c.locality != "" && (!strings.Contains(b, "@llvm.prefetch.p0i8(") || !strings.Contains(b, c.locality)) {
			t.Errorf("@%s does not prefetch with (%s):\n%s", c.fn, c.locality, b)
		}
		if c.helper != "" && !strings.Contains(b, c.helper) {
			t.Errorf("@%s does not call %s:\n%s", c.fn, c.helper, b)
		}
	}
	scan := body("yard_scan")
	for _, want := range []string{"br i1 %tol2, label %pf.l2, label %pf.l1", "pf.l2:\n  call void @yard_block_pf_l2(", "pf.l1:\n  call void @yard_block_pf("} {
		if !strings.Contains(scan, want) {
			t.Errorf("yard_scan lacks %q", want)
		}
	}
}
