package hip_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hipgen "github.com/attnc/attnc/codegen/hip"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/hip"
)

// TestExamplesISA compiles every example for gfx942 with clang-19 (no
// ROCm) and checks the machine code against ISATargets: no scratch, no VGPR
// spills, VGPRs within the manifest's bound and occupancy at least the
// manifest's in every kernel, MFMA in every f16/bf16 prefill scheduled on
// 16-row items. Reported, not failed: SGPR spills (to lanes of a VGPR, no
// memory), which the prefill kernels with many table arguments, inline
// RoPE or the accumulator in registers still have (a few to a few tens of
// SGPRs); attnc isa --check lists them as unmet.
func TestExamplesISA(t *testing.T) {
	if _, err := hipgen.Clang(); err != nil {
		needtool.Check(t, fmt.Errorf("clang++-19 not found: %w", err))
	}
	specs, err := filepath.Glob("../../examples/*.attn")
	if err != nil || len(specs) == 0 {
		t.Fatalf("no examples (%v)", err)
	}
	vs, err := driver.ParseSpecs(specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if lower.Unsupported(v) != nil {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			c, err := driver.Compile(v, hip.Target{}, driver.Options{})
			if err != nil {
				t.Fatal(err)
			}
			arts, err := hip.Target{}.Emit(v, c.Final, targets.Options{})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			rows, err := hip.ISA(v, arts[0].Data, hip.Target{}.Manifest(v, c.Final, targets.Options{}), []string{"gfx942"}, dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(c.Final.Kernels) {
				t.Errorf("%d kernels in the assembly, %d in the module", len(rows), len(c.Final.Kernels))
			}
			rows16 := hip.FitTiling(v).Rows == 16
			for _, u := range hip.CheckISA(rows) {
				if strings.Contains(u, ": zero SGPR spills (") || strings.Contains(u, ": f16/bf16 prefill has MFMA (") && !rows16 {
					t.Logf("%s", u)
					continue
				}
				t.Errorf("%s", u)
			}
			if os.Getenv("ATTNC_ISA_TABLE") != "" {
				var sb strings.Builder
				hip.WriteISATable(&sb, rows)
				t.Logf("\n%s", sb.String())
			}
		})
	}
}
