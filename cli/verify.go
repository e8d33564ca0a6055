package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnc/attnc/targets"
	"github.com/spf13/cobra"
)

// verifyFlags are the options of `attnc verify`.
type verifyFlags struct {
	threads []int
	seed    int64
	target  string
	gpu     bool
	triple  string
	// cpuLevels: --cpu-levels, nil for every level (cpuLevelsFlag)
	cpuLevels []string
	cfg       *config
}

func newVerifyCmd(cfg *config) *cobra.Command {
	vf := verifyFlags{cfg: cfg}
	c := &cobra.Command{
		Use:   "verify SPEC... [--threads 1,4] [--seed N] [--target " + strings.Join(harnessed(), "|") + "] [--gpu]",
		Short: "Build each variant's kernels and check them against the reference",
		Long: `Compile every supported variant, load its kernels, and run each one on
random paged caches against the float64 reference implementation: ragged
prefill with empty sequences, shared prefixes, queries spanning pages and
tiles, decode batches with split KV, merge_state with empty states, NaN/Inf
in unused slots and pages, and (CPU) bad inputs that must return the
documented status code.

--target selects the kernels:

  cpu    (default) the CPU kernels, linked into a shared library with LLVM
         14 opt/llc and gcc; each case runs at every --threads count
  cuda   the CUDA source (<variant>.cu) and its host launchers. Without
         --gpu it is compiled as C++ with g++ against attnc's CUDA emulator
         and runs on the CPU (one fiber per CUDA thread). With --gpu it is
         compiled with nvcc (-O3 -arch=native, else sm_90) and runs on the
         GPU: every buffer is copied to the device, the launcher gets device
         pointers, the outputs are copied back after cudaDeviceSynchronize.
         --gpu needs nvcc (PATH, $ATTNC_NVCC or /usr/local/cuda/bin) and
         libcudart. --threads does not apply: each case runs once.
  hip    the HIP source (<variant>.hip) and its launchers, compiled as C++
         against the same emulator with 64-lane wavefronts (gfx942's); it
         runs on the CPU only (--gpu is CUDA's).

--gpu alone implies --target cuda.

--triple aarch64-unknown-linux-gnu (target cpu) cross-compiles the CPU
kernels for aarch64 (opt/llc -mtriple, aarch64-linux-gnu-gcc) and runs the
same cases under qemu-aarch64 -L /usr/aarch64-linux-gnu, each case's
buffers copied into the emulated process and the outputs back (Debian:
apt-get install gcc-aarch64-linux-gnu qemu-user).

One line is printed per case (PASS/FAIL, kernel, case, threads, the errors
and the bound applied), then "N passed, M failed". f32 outputs and every
lse must be within tol = 1e-5 of max(1, |reference|). An f16 or bf16 output
element must be within half an ulp of the exact value (what rounding it once
gives) plus 2^-20 of the row's magnitude mag = sum_j w_j |v_j| / sum_j w_j
(the f32 accumulation's allowance), so max_err may exceed 0.5ulp and still
pass: allowance_used is the largest share of that allowance an element's
error past half an ulp used, at most 1 in a passing case (0 when every
element is within half an ulp).

User passes (a custom attnc built with cli.WithPasses) are in the kernels
verify builds, but the reference computes the spec without them. verify
then also runs the cases on kernels built without the passes, marks every
case whose outputs the passes change ("[changed by the user passes]": its
comparison is against attention without the passes) and lists them per
variant; a case they leave unchanged does not check them.
Variants using features that do not generate kernels yet are reported as
"skip <variant>: <reason>" and do not fail the run. attnc exits with status
1 if any case failed or the tools are missing. The same --seed gives the
same inputs.`,
		Example: `  attnc verify examples/llama3_8b.attn
  attnc verify examples/*.attn --threads 1,2,8 --seed 7
  attnc verify examples/llama3_8b.attn --cpu-levels host  # this CPU's level's clones only
  attnc verify examples/llama3_8b.attn --triple aarch64-unknown-linux-gnu  # under qemu
  attnc verify examples/llama3_8b.attn --target cuda        # CUDA emulator (g++)
  attnc verify examples/llama3_8b.attn --target cuda --gpu  # nvcc, on the GPU`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if vf.gpu && !c.Flags().Changed("target") {
				t, err := gpuTarget("attnc verify")
				if err != nil {
					return err
				}
				vf.target = t
			}
			if !slices.Contains(harnessed(), vf.target) {
				return fmt.Errorf("attnc verify: unknown --target %q (%s)", vf.target, orList(harnessed()))
			}
			if vf.gpu && !slices.Contains(deviceTargets(), vf.target) {
				return fmt.Errorf("attnc verify: --gpu runs the %s kernels; use it with --target %s", strings.ToUpper(orList(deviceTargets())), orList(deviceTargets()))
			}
			if vf.triple != "" && !takesTriple(vf.target) {
				return fmt.Errorf("attnc verify: --triple applies to the %s target", tripleTarget())
			}
			var err error
			if vf.cpuLevels, err = cpuLevelsFlag(c, "attnc verify", vf.cpuLevels, takesTriple(vf.target), vf.triple, cpuLevelsFix(c, vf.gpu)); err != nil {
				return err
			}
			return runVerify(c, args, vf)
		},
	}
	c.Flags().IntSliceVar(&vf.threads, "threads", []int{1, 4}, "CPU thread counts to run every case at (comma list)")
	c.Flags().Int64Var(&vf.seed, "seed", 1, "random seed of the generated inputs")
	c.Flags().StringVar(&vf.target, "target", targets.Default, "kernels to verify: "+orList(harnessed())+" (GPU targets emulated on the CPU; on the GPU with --gpu)")
	c.Flags().StringVar(&vf.triple, "triple", "", "target triple of the cpu kernels; another architecture than this machine's runs under its emulator (qemu)")
	c.Flags().StringSliceVar(&vf.cpuLevels, "cpu-levels", nil, cpuLevelsUsage+"; the kernels run at the best level built that this CPU runs")
	c.Flags().BoolVar(&vf.gpu, "gpu", false, "run the cuda target on the GPU (nvcc and libcudart); implies --target cuda")
	return c
}
