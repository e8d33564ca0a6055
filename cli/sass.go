package cli

import (
	"fmt"
	"os"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/codegen/cuda"
	"github.com/attnc/attnc/codegen/cuda/sass"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/spf13/cobra"
)

func newSASSCmd(cfg *config) *cobra.Command {
	var archs []string
	var check bool
	c := &cobra.Command{
		Use:   "sass SPEC... [--arch sm_80,sm_90] [--check]",
		Short: "Assemble each variant's CUDA kernels with ptxas and tabulate the machine code",
		Long: `Build the CUDA kernels of every supported variant, compile them to PTX with
clang-19, assemble the PTX with NVIDIA's ptxas for each --arch and read the
machine code (SASS) back with cuobjdump. Per variant, one line per kernel
and architecture:

  regs     registers per thread
  stack    stack frame bytes per thread (local memory)
  spill    spill stores/loads, bytes per thread
  smem     static + dynamic shared memory bytes per block (the manifest's launch)
  block    threads per block (the manifest's launch)
  blk/SM   blocks of that launch resident on one SM, warps (and the share of
           the 64 warp slots), and what limits them (warps, regs, smem,
           blocks): computed from the architecture's per-SM limits
  LDGSTS LDSM HMMA LDL STL LDG.128 LDS.U16 BAR SHFL
           instruction counts: cp.async, ldmatrix, tensor-core mma, local
           loads/stores, 128-bit global loads, 16-bit shared loads,
           barriers, warp shuffles
  insns    all instructions

--check also tests the targets the CUDA kernels are built towards (no
spills and no stack frame in any kernel; LDGSTS, LDSM and HMMA and no
LDL/STL in every f16/bf16 prefill; LDGSTS or LDG.128 in decode; registers
within the manifest launch's max_registers and occupancy at least its
occupancy), prints
"target not met: ..." for each one missed and exits with status 1 if any
is, else prints "all targets met".

Needs clang-19 and ptxas/cuobjdump from CUDA 11.8 or newer:
scripts/fetch-ptxas.sh unpacks them from Debian's non-free archive into
~/.cache/attnc/cuda-tools, where attnc finds them ($ATTNC_PTXAS and
$ATTNC_CUOBJDUMP, PATH and /usr/local/cuda/bin are searched too). No GPU is
needed. Variants using features that do not generate kernels yet are
reported as "skip <variant>: <reason>".`,
		Example: `  attnc sass examples/llama3_8b.attn
  attnc sass examples/*.attn --arch sm_90
  attnc sass examples/*.attn --check`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			archs = splitList(archs)
			if len(archs) == 0 {
				return fmt.Errorf("attnc sass: --arch is empty")
			}
			for _, a := range archs {
				if _, ok := sass.Archs[a]; !ok {
					return fmt.Errorf("attnc sass: unknown --arch %q (known: sm_80, sm_90)", a)
				}
			}
			vs, err := driver.ParseSpecs(args)
			if err != nil {
				return err
			}
			if _, err := cuda.ClangCUDA(); err != nil {
				return fmt.Errorf("attnc sass: %w", err)
			}
			tools, err := sass.FindTools()
			if err != nil {
				return fmt.Errorf("attnc sass: %w", err)
			}
			tmp, err := os.MkdirTemp("", "attnc-sass-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			stdout := c.OutOrStdout()
			var unmet []string
			for _, v := range vs {
				if err := lower.Unsupported(v); err != nil {
					fmt.Fprintf(stdout, "skip %s: %v\n", v.Name, err)
					continue
				}
				// What build writes for the cuda target, user passes included.
				r, err := attnc.CompileVariants([]*ir.Variant{v}, attnc.Options{Targets: []string{"cuda"}, Insert: cfg.insert})
				if err != nil {
					return err
				}
				out := &driver.Output{Manifest: r.Manifest, Variants: r.Variants}
				for _, name := range r.Names() {
					out.Artifacts = append(out.Artifacts, driver.Artifact{Name: name, Data: r.Files[name]})
				}
				rows, err := driver.SASS(out, archs, tools, tmp)
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "sass %s dtype=%s ptxas=%s\n", v.Name, v.DType, tools.Release)
				if err := driver.WriteSASSTable(stdout, rows); err != nil {
					return err
				}
				unmet = append(unmet, driver.CheckSASS(rows)...)
			}
			if !check {
				return nil
			}
			for _, u := range unmet {
				fmt.Fprintf(stdout, "target not met: %s\n", u)
			}
			if len(unmet) > 0 {
				fmt.Fprintf(c.ErrOrStderr(), "attnc sass: %d machine-code targets not met\n", len(unmet))
				return errReported
			}
			fmt.Fprintln(stdout, "all targets met")
			return nil
		},
	}
	c.Flags().StringSliceVar(&archs, "arch", []string{"sm_80", "sm_90"}, "GPU architectures to assemble for (comma list)")
	c.Flags().BoolVar(&check, "check", false, "test the machine-code targets; exit 1 if any is not met")
	return c
}
