package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// maxBenchSeconds bounds --seconds (an hour per measurement).
const maxBenchSeconds = 3600

// benchFlags are the options of `attnc bench`.
type benchFlags struct {
	target  string
	gpu     bool
	seconds float64
	batch   int
	kvLen   int
	qLen    int
	threads int
	seed    int64
	cfg     *config
}

func newBenchCmd(cfg *config) *cobra.Command {
	bf := benchFlags{cfg: cfg}
	c := &cobra.Command{
		Use:   "bench SPEC... [--target cpu|cuda] [--gpu] [--seconds S]",
		Short: "Measure each variant's decode and prefill against same-run baselines",
		Long: `Build every supported variant and time its decode and prefill entries
on random paged caches (pages scattered over the pool). Every number is
reported next to a baseline measured in the same run, so the ratios carry
from one machine to another:

  decode   --batch sequences of --kv-len cached tokens each (default 8 x
           4096): K+V bytes read per second (gbps), against copying a
           buffer of the same size (copy_gbps counts bytes read plus bytes
           written; CPU: Go's copy on as many goroutines as the kernels use
           threads, GPU: cudaMemcpy device to device): ratio_vs_copy
  prefill  one sequence with q_len = kv_len = --q-len (default 1024):
           FLOP/s (2*q*kv*qo_heads*(d_qk + d_v), halved for a causal or
           window mask), against the same run's decode FLOP/s:
           ratio_vs_decode

--target cpu (default) runs the CPU kernels on --threads worker threads
(default all online CPUs); it needs LLVM 14 opt/llc and gcc. --target cuda
--gpu (or --gpu alone) compiles the CUDA source with nvcc and runs it on
the GPU, timing groups of calls by wall clock up to cudaDeviceSynchronize;
it needs nvcc and libcudart. The CUDA emulator is not a performance target,
so --target cuda requires --gpu. Each measurement runs for at least
--seconds after one untimed call, and the output is checked to be finite.

Per variant, bench prints a header and one key=value line per entry:

  bench <variant> target=cpu threads=T dtype=... qo_heads=... kv_heads=... ...
  decode  <variant> batch=... kv_len=... calls=... ms=... kv_bytes=... gbps=...
          copy=... copy_ms=... copy_gbps=... ratio_vs_copy=... gflops=...
  prefill <variant> batch=1 q_len=... kv_len=... causal=... calls=... ms=...
          gflops=... tflops=... ratio_vs_decode=...

(ms is the mean time per call; each entry is one line, wrapped here.)

Variants using features that do not generate kernels yet are reported as
"skip <variant>: <reason>".`,
		Example: `  attnc bench examples/llama3_8b.attn
  attnc bench examples/llama3_8b.attn --threads 8 --seconds 3
  attnc bench examples/llama3_8b.attn --target cuda --gpu --batch 64`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if bf.gpu && !c.Flags().Changed("target") {
				bf.target = "cuda"
			}
			switch {
			case bf.target == "cpu" && bf.gpu:
				return fmt.Errorf("attnc bench: --gpu runs the CUDA kernels; use it with --target cuda")
			case bf.target == "cuda" && !bf.gpu:
				return fmt.Errorf("attnc bench: --target cuda measures the GPU; add --gpu (the CUDA emulator is for correctness only: attnc verify --target cuda)")
			case bf.target != "cpu" && bf.target != "cuda":
				return fmt.Errorf("attnc bench: unknown --target %q (cpu or cuda)", bf.target)
			}
			const cmd = "attnc bench"
			if !(bf.seconds > 0 && bf.seconds <= maxBenchSeconds) {
				return fmt.Errorf("%s: --seconds %g is out of range: more than 0 and at most %d", cmd, bf.seconds, maxBenchSeconds)
			}
			if err := checkBatch(cmd, []int{bf.batch}, 1); err != nil {
				return err
			}
			if err := checkSeqLen(cmd, "--kv-len", []int{bf.kvLen}, 1); err != nil {
				return err
			}
			if err := checkSeqLen(cmd, "--q-len", []int{bf.qLen}, 1); err != nil {
				return err
			}
			if bf.threads != 0 {
				if err := checkThreads(cmd, []int{bf.threads}); err != nil {
					return err
				}
			}
			return runBench(c, args, bf)
		},
	}
	f := c.Flags()
	f.StringVar(&bf.target, "target", "cpu", "kernels to measure: cpu, or cuda (with --gpu)")
	f.BoolVar(&bf.gpu, "gpu", false, "run the cuda target on the GPU (nvcc and libcudart); implies --target cuda")
	f.Float64Var(&bf.seconds, "seconds", 1, "least wall time of each measurement")
	f.IntVar(&bf.batch, "batch", 8, "decode: sequences")
	f.IntVar(&bf.kvLen, "kv-len", 4096, "decode: cached tokens per sequence")
	f.IntVar(&bf.qLen, "q-len", 1024, "prefill: query tokens of its one sequence (= its kv_len)")
	f.IntVar(&bf.threads, "threads", 0, "CPU worker threads (0: all online CPUs)")
	f.Int64Var(&bf.seed, "seed", 1, "random seed of the inputs")
	return c
}
