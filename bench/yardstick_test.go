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
				if _, _, err := y.clock(2, 1000, out); err != nil {
					t.Error(err)
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
	if levels[0].X86 && (y.Clock.Rate().N != 2 || y.FlopsPerCycle() <= 0) {
		t.Errorf("clock %+v", y.Clock.Rate())
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
