package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/targets"
	"github.com/spf13/cobra"
)

// benchFlags are the options of `attnc bench`.
type benchFlags struct {
	target  string
	gpu     bool
	seconds float64
	reps    int
	batch   int
	kvLen   int
	qLen    int
	threads int
	seed    int64
	cfg     *config
	json    string
	workDir string
	// cpuLevels: --cpu-levels, nil for every level (cpuLevelsFlag)
	cpuLevels []string

	// The built-in cases' shape and storage types (no SPEC given).
	qoHeads, kvHeads, headDim, pageSize int
	decode, prefill                     []string

	poolMiB, streamMiB int
}

// Bounds of the numeric bench flags.
const (
	maxBenchSeconds = 3600
	maxBenchReps    = 100000
	maxBenchBatch   = 4096
	maxBenchKVLen   = 1 << 20
	maxBenchQLen    = 65536
	maxBenchMiB     = 1 << 20
)

// builtinFlags shape the built-in cases; a spec sets them itself.
var builtinFlags = []string{"qo-heads", "kv-heads", "head-dim", "page-size", "decode", "prefill"}

// check validates the flags; c tells which were given.
func (bf *benchFlags) check(c *cobra.Command, specs int) error {
	if bf.gpu && !c.Flags().Changed("target") {
		t, err := gpuTarget("attnc bench")
		if err != nil {
			return err
		}
		bf.target = t
	}
	var err error
	if bf.cpuLevels, err = cpuLevelsFlag(c, "attnc bench", bf.cpuLevels, !bf.gpu && takesTriple(bf.target), "", cpuLevelsFix(c, bf.gpu)); err != nil {
		return err
	}
	// The host bench measures a target whose kernels run on this CPU's
	// worker threads against the machine yardsticks; --gpu one whose
	// kernels run on an accelerator.
	devs := deviceTargets()
	known := benchTargets()
	switch {
	case !slices.Contains(known, bf.target):
		return fmt.Errorf("attnc bench: unknown --target %q (%s)", bf.target, orList(known))
	case bf.gpu && !slices.Contains(devs, bf.target):
		return fmt.Errorf("attnc bench: --gpu runs the %s kernels; use it with --target %s", strings.ToUpper(orList(devs)), orList(devs))
	case !bf.gpu && !threaded(bf.target):
		return fmt.Errorf("attnc bench: --target %s measures the GPU; add --gpu (the %s emulator is for correctness only: attnc verify --target %s)", bf.target, strings.ToUpper(bf.target), bf.target)
	}
	if !(bf.seconds > 0 && bf.seconds <= maxBenchSeconds) {
		return fmt.Errorf("attnc bench: --seconds must be in (0, %d] (got %g)", maxBenchSeconds, bf.seconds)
	}
	for _, f := range []struct {
		name   string
		v      int
		lo, hi int
	}{
		{"threads", bf.threads, 0, attnc.ThreadsBound.Hi},
		{"reps", bf.reps, 0, maxBenchReps},
		{"batch", bf.batch, 1, maxBenchBatch},
		{"kv-len", bf.kvLen, 1, maxBenchKVLen},
		{"q-len", bf.qLen, 1, maxBenchQLen},
		{"pool-mib", bf.poolMiB, 1, maxBenchMiB},
		{"stream-mib", bf.streamMiB, 0, maxBenchMiB},
	} {
		if f.v < f.lo || f.v > f.hi {
			return fmt.Errorf("attnc bench: --%s must be in %d..%d (got %d)", f.name, f.lo, f.hi, f.v)
		}
	}
	if specs > 0 {
		for _, n := range builtinFlags {
			if c.Flags().Changed(n) {
				return fmt.Errorf("attnc bench: --%s shapes the built-in cases; with SPEC files the specs set it", n)
			}
		}
	}
	if bf.gpu {
		if specs == 0 {
			return fmt.Errorf("attnc bench: --gpu measures the variants of SPEC files; give at least one")
		}
		for _, n := range []string{"json", "reps", "threads", "pool-mib", "stream-mib", "work-dir"} {
			if c.Flags().Changed(n) {
				return fmt.Errorf("attnc bench: --%s is for the CPU bench; --gpu prints key=value lines", n)
			}
		}
	}
	return nil
}

func newBenchCmd(cfg *config) *cobra.Command {
	bf := benchFlags{cfg: cfg}
	c := &cobra.Command{
		Use:   "bench [SPEC...] [--threads T] [--seconds S | --reps N] [--json FILE]",
		Short: "Measure decode and prefill against this machine's read bandwidth and FMA peak",
		Long: `Measure attention kernels against the limits of this machine, measured
in the same run and on the same thread count, so that the ratios carry from
one machine to another.

Yardsticks (CPU), compiled by LLVM 14 for the widest vector level this CPU
has (x86-64-v4 with AVX-512, x86-64-v3, ...), each printed with its level:

  stream read    a read-only reduction over max(1 GiB, 8 x LLC) bytes
                 (--stream-mib), also with a software prefetch one block
                 ahead, then the same bytes in page-sized blocks
                 (page_size x kv_heads x head_dim x 2 bytes) in a random
                 order, without and with a prefetch of the next block
  fp32 fma       register-resident FMA chains at every vector level the CPU
                 has with FMA instructions; the widest is the fma peak
  clock          a chain of dependent 64-bit integer multiplies (x86-64;
                 3 cycles each on every x86-64 core), checked by a chain of
                 dependent adds: GHz per thread and the peak's
                 flop/cycle/thread, or neither where the two disagree

Cases, each call timed once per repetition (median, quartiles, extremes;
CPU decode calls by the clock read in C just before and after the entry):

  decode   --batch sequences of --kv-len cached tokens (default 8 x 4096):
           K+V bytes the queries see, as stored, per second (GB/s); the
           pages live in a pool of at least --pool-mib MiB (default 1024)
           and each call reads another disjoint page set, so no cache
           serves them. ratio: to the stream read; scan: to the case's
           paged scan, a plain read of exactly the bytes the decode reads
           (its pools, page tables and page sets, each (sequence, kv head)
           item's pages in order, K and V blocks in the cache's layout and
           storage type) on the same threads, taking items as the decode
           does, at the best of no prefetch and 1, 2 and 4 pages of
           prefetch into L1 and into L2: the decode's memory-side limit.
           Each round calls the decode twice, then the scan with each
           prefetch, so the memory's load moves
           both alike; the timed call is the second, which finds the
           kernels' workers awake as back-to-back calls do (the first,
           after the scans, is shown as "first call"). Beside the scan,
           the decode's arithmetic limit: the
           time its multiply-adds take at the fma peak, also as a
           fraction of the scan's time
  prefill  one sequence with q_len = kv_len = --q-len (default 2048):
           GFLOP/s, 2 x (d_qk + d_v) per visible (query, kv) pair per qo
           head (causal: 2*2*d*L(L+1)/2*heads). ratio: to the fma peak

Without SPEC files the cases are built in: decode for --decode dtypes
(default f32,f16,bf16,f16/e4m3,f16/i8) and prefill for --prefill dtypes
(default f32,bf16), on --qo-heads/--kv-heads/--head-dim/--page-size (default
32/8/128/16, causal). An item q/kv (e.g. f16/e4m3) is q and o of dtype q over
an 8-bit K/V cache of kv_dtype kv (e4m3, e5m2, i8; per-tensor scales), whose
bytes count as stored (one per element); a kv_dtype the spec language does not
know is reported as skipped. An 8-bit decode is also reported as a time ratio
to the decode over a cache of its query dtype, beside the ratio of their paged
scans' times (what the memory allows). With SPEC files, the decode and
prefill entries of every supported variant are measured instead.

The kernels are compiled as attnc build --shared does (opt -O3, llc -O3) and
run the best CPU level this CPU has (x86-64-v4 with AVX-512, x86-64-v3,
x86-64), or the one ATTNC_CPU_LEVEL forces.
Each measurement runs for --seconds and at least 5 repetitions, or exactly
--reps; --threads sets the kernels' and the yardsticks' threads (default
all online CPUs). The table goes to stdout; --json FILE also writes every
repetition, the machine, its load averages before and after, and the
ratios. The output of every case is checked to be finite.

--target cuda --gpu (or --gpu alone) compiles the SPEC files' CUDA source
with nvcc and times it on the GPU instead, by wall clock over groups of
calls ended by cudaDeviceSynchronize, against a device-to-device
cudaMemcpy of the decode's K+V bytes; it prints key=value lines:

  bench <variant> target=cuda-device dtype=... qo_heads=... kv_heads=... ...
  decode  <variant> batch=... kv_len=... calls=... ms=... kv_bytes=... gbps=...
          copy=cudaMemcpyD2D copy_ms=... copy_gbps=... ratio_vs_copy=... gflops=...
  prefill <variant> batch=1 q_len=... kv_len=... causal=... calls=... ms=...
          gflops=... tflops=... ratio_vs_decode=...

(each entry is one line, wrapped here). Variants using features that do not
generate kernels yet are reported as "skip <variant>: <reason>".`,
		Example: `  attnc bench --json bench.json
  attnc bench --threads 8 --seconds 3 --decode f16 --prefill ""
  attnc bench examples/llama3_8b.attn --kv-len 16384
  attnc bench examples/llama3_8b.attn --target cuda --gpu --batch 64`,
		RunE: func(c *cobra.Command, args []string) error {
			if err := bf.check(c, len(args)); err != nil {
				return err
			}
			return runBench(c, args, bf)
		},
	}
	f := c.Flags()
	f.StringVar(&bf.target, "target", targets.Default, "kernels to measure: "+orList(benchTargets())+" (a GPU target with --gpu)")
	f.BoolVar(&bf.gpu, "gpu", false, "run the cuda target on the GPU (nvcc and libcudart); implies --target cuda")
	f.Float64Var(&bf.seconds, "seconds", 1, "least wall time of each measurement (at least 5 repetitions)")
	f.IntVar(&bf.reps, "reps", 0, "exact repetitions of each measurement (0: by --seconds)")
	f.IntVar(&bf.batch, "batch", 8, "decode: sequences")
	f.IntVar(&bf.kvLen, "kv-len", 4096, "decode: cached tokens per sequence")
	f.IntVar(&bf.qLen, "q-len", 2048, "prefill: query tokens of its one sequence (= its kv_len)")
	f.IntVar(&bf.threads, "threads", 0, "CPU threads of the kernels and the yardsticks (0: all online CPUs)")
	f.Int64Var(&bf.seed, "seed", 1, "random seed of the inputs")
	f.StringSliceVar(&bf.cpuLevels, "cpu-levels", nil, cpuLevelsUsage+"; the kernels run at the best level built that this CPU runs")
	f.StringVar(&bf.json, "json", "", "also write the report as JSON to this file")
	f.StringVar(&bf.workDir, "work-dir", "", "build the kernels and yardsticks in this directory and keep them (a profiler finds their symbols there)")
	f.IntVar(&bf.qoHeads, "qo-heads", 32, "built-in cases: query heads")
	f.IntVar(&bf.kvHeads, "kv-heads", 8, "built-in cases: KV heads")
	f.IntVar(&bf.headDim, "head-dim", 128, "built-in cases: head dimension")
	f.IntVar(&bf.pageSize, "page-size", 16, "built-in cases: tokens per page")
	f.StringSliceVar(&bf.decode, "decode", []string{"f32", "f16", "bf16", "f16/e4m3", "f16/i8"}, "built-in decode cases: storage dtypes (q/kv for an 8-bit cache)")
	f.StringSliceVar(&bf.prefill, "prefill", []string{"f32", "bf16"}, "built-in prefill cases: storage dtypes")
	f.IntVar(&bf.poolMiB, "pool-mib", 1024, "decode: least K+V pool size in MiB (at least twice one call's pages)")
	f.IntVar(&bf.streamMiB, "stream-mib", 0, "stream read buffer in MiB (0: max(1 GiB, 8 x LLC))")
	return c
}
