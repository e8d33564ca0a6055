package bench

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
)

// The benchmarks measure what `attnc bench` measures, on all online CPUs:
// go test ./bench -run XXX -bench . (they skip without the LLVM tools).
// The decode and prefill benchmarks report their ratio to yardsticks
// measured once per process (three repetitions each).

var benchYard struct {
	once sync.Once
	y    *Yardsticks
	err  error
}

func yardsticks(b *testing.B) *Yardsticks {
	needTools(b)
	benchYard.once.Do(func() {
		dir, err := os.MkdirTemp("", "attnc-bench-yard-")
		if err != nil {
			benchYard.err = err
			return
		}
		defer os.RemoveAll(dir)
		benchYard.y, benchYard.err = MeasureYardsticks(YardOptions{Threads: runtime.NumCPU(), Budget: Budget{Reps: 3}, Dir: dir})
	})
	if benchYard.err != nil {
		b.Fatal(benchYard.err)
	}
	return benchYard.y
}

// widest builds the yardstick library of the machine's widest level.
func widest(b *testing.B) *yardLib {
	needTools(b)
	y, err := buildYardLib(ReadMachine().Levels()[0], b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(y.close)
	return y
}

// BenchmarkStreamRead reads max(1 GiB, 8 x LLC) once per op.
func BenchmarkStreamRead(b *testing.B) {
	y, threads := widest(b), runtime.NumCPU()
	n, _ := streamBytes(ReadMachine())
	rb, err := newReadBuffer(n, threads, 4096)
	if err != nil {
		b.Fatal(err)
	}
	defer rb.free()
	out := newSlots(threads)
	defer out.free()
	b.SetBytes(rb.bytes())
	b.ResetTimer()
	for range b.N {
		if _, err := y.read(rb, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamReadBlocks reads the same bytes in blocks in a random
// order: 32 KiB (a K page of issue 10's shape at 16 bits, what attnc bench
// reads) and 4 KiB (one KV head's rows of such a page), without and with a
// prefetch of the next block.
func BenchmarkStreamReadBlocks(b *testing.B) {
	y, threads := widest(b), runtime.NumCPU()
	n, _ := streamBytes(ReadMachine())
	rb, err := newReadBuffer(n, threads, 32<<10)
	if err != nil {
		b.Fatal(err)
	}
	defer rb.free()
	out := newSlots(threads)
	defer out.free()
	for _, block := range []int64{32 << 10, 4 << 10} {
		bo, err := newBlockOrder(rb, block, 1)
		if err != nil {
			b.Fatal(err)
		}
		defer bo.free()
		for _, tc := range []struct {
			name  string
			ahead int
		}{{"plain", 0}, {"prefetch", 1}} {
			b.Run(fmt.Sprintf("%dKiB/%s", block>>10, tc.name), func(b *testing.B) {
				b.SetBytes(bo.bytes())
				for range b.N {
					if _, err := y.readBlocks(rb, bo, tc.ahead, out); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkFMAPeak runs the FMA chains at every vector level with FMA, 1<<20
// iterations per thread per op, and reports GFLOP/s.
func BenchmarkFMAPeak(b *testing.B) {
	needTools(b)
	threads := runtime.NumCPU()
	params := cpurt.F32Buffer(fmaParams[:])
	defer params.Free()
	out := newSlots(threads)
	defer out.free()
	for _, l := range fmaLevels(ReadMachine().Levels()) {
		b.Run(l.MCPU, func(b *testing.B) {
			y, err := buildYardLib(l, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer y.close()
			const iters = 1 << 20
			b.ResetTimer()
			for range b.N {
				if _, _, err := y.fma(threads, iters, params, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(y.fmaFlops(iters)*float64(threads)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// builtinWorkload builds the built-in case (role, storage: "f16" or
// "f16/e4m3") in issue 10's shape with its pool.
func builtinWorkload(b *testing.B, role ir.Role, storage string) *poolWorkload {
	needTools(b)
	bi, err := ParseStorage(role, storage)
	if err != nil {
		b.Fatal(err)
	}
	p := BuiltinPlan(DefaultHeads, []Builtin{bi})
	if p.Variants[0].Err != nil {
		b.Fatal(p.Variants[0].Err)
	}
	s, err := conformance.Build(p.Variants[0].Variant, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.SetThreads(0); err != nil {
		b.Fatal(err)
	}
	o := CPUOptions{}.withDefaults()
	sh, pool := prefillCall(o.QLen), int64(0)
	if role == ir.RoleDecode {
		sh, pool = decodeCall(o.Batch, o.KVLen), o.PoolBytes
	}
	w, err := newPoolWorkload(s, role, sh, pool, ReadMachine().MemAvail, runtime.NumCPU(), 1)
	if err != nil {
		b.Fatal(err)
	}
	w.dropCase()
	b.Cleanup(w.free)
	if err := w.call(len(w.tables) - 1); err != nil {
		b.Fatal(err)
	}
	return w
}

// BenchmarkDecodeCPU times decode (8 x 4096, 32/8 heads, d 128, page 16)
// for f32, f16 and bf16, and f16 queries over e4m3 and i8 caches, over a
// rotated 1 GiB pool and reports the K+V bandwidth (bytes as stored) and
// its ratio to the stream read.
func BenchmarkDecodeCPU(b *testing.B) {
	for _, dt := range []string{"f32", "f16", "bf16", "f16/e4m3", "f16/i8"} {
		b.Run(strings.ReplaceAll(dt, "/", "_"), func(b *testing.B) {
			y := yardsticks(b)
			w := builtinWorkload(b, ir.RoleDecode, dt)
			b.SetBytes(w.kvBytes)
			b.ResetTimer()
			for i := range b.N {
				if err := w.call(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := w.checkOutput(); err != nil {
				b.Fatal(err)
			}
			gbps := float64(w.kvBytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(gbps, "GB/s")
			b.ReportMetric(gbps/y.Read.Rate().Median, "ratio_to_stream_read")
		})
	}
}

// BenchmarkPrefillCPU times causal prefill of 2048 tokens for f32 and
// bf16 and reports GFLOP/s and the ratio to the FMA peak.
func BenchmarkPrefillCPU(b *testing.B) {
	for _, dt := range []string{"f32", "bf16"} {
		b.Run(dt, func(b *testing.B) {
			y := yardsticks(b)
			w := builtinWorkload(b, ir.RolePrefill, dt)
			b.ResetTimer()
			for i := range b.N {
				if err := w.call(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := w.checkOutput(); err != nil {
				b.Fatal(err)
			}
			gflops := w.flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(gflops, "GFLOP/s")
			b.ReportMetric(gflops/y.Peak().M.Rate().Median, "ratio_to_fma_peak")
		})
	}
}
