package hip_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/codegen/cstyle"
	hipgen "github.com/attnc/attnc/codegen/hip"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/targets"
	"github.com/attnc/attnc/targets/hip"
)

// examplesAll runs TestExamplesISA on every example; CI's long pass
// (.ci/run) sets it.
var examplesAll = flag.Bool("examples.all", false, "run TestExamplesISA on every example, not only isaShort")

// isaShort are the examples TestExamplesISA compiles by default (about a
// quarter of the examples' cost), the CUDA toolchain tests' choice in
// driver: f16 on MFMA with an 8-bit cache, append and copy_page
// (llama3_8b_fp8), f32 on the SIMT path in NHD (mha_softcap), MLA
// (deepseek_v3_mla) and bf16 with qkv_append (qwen3_8b).
var isaShort = []string{"deepseek_v3_mla", "llama3_8b_fp8", "mha_softcap", "qwen3_8b"}

// TestISAShortNamesExist: every isaShort name is an example.
func TestISAShortNamesExist(t *testing.T) {
	for _, n := range isaShort {
		if _, err := os.Stat(filepath.Join("..", "..", "examples", n+".attn")); err != nil {
			t.Errorf("isaShort names %s, which examples/ does not have: %v", n, err)
		}
	}
}

// TestExamplesISA compiles every example (isaShort unless -examples.all)
// for gfx942 with clang-19 (no
// ROCm) and checks the machine code against every ISATarget: no scratch and
// no VGPR or SGPR spills in any kernel, VGPRs within the manifest's bound
// and occupancy at least the manifest's, MFMA in every f16/bf16 prefill on
// 16-row items. It also checks that the argument offsets the printer gives
// ATTNC_ARG (cstyle.ArgOffsets) are those of the code object's argument
// segment, kernel by kernel.
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
		if lower.Unsupported(v) != nil || !*examplesAll && !slices.Contains(isaShort, v.Name) {
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
			for _, u := range hip.CheckISA(rows) {
				t.Errorf("%s", u)
			}
			for _, r := range rows {
				k := c.Final.Kernel(r.Name)
				if k == nil {
					t.Errorf("%s: not in the module", r.Name)
					continue
				}
				var got []int
				for _, a := range r.Explicit() {
					got = append(got, a.Offset)
				}
				if want := cstyle.ArgOffsets(k); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: argument offsets %v in the code object, ArgOffsets %v", r.Name, got, want)
				}
				if r.ItemRows != 16 {
					t.Logf("%s: %d-row items, no MFMA expected", r.Name, r.ItemRows)
				}
			}
			if os.Getenv("ATTNC_ISA_TABLE") != "" {
				var sb strings.Builder
				hip.WriteISATable(&sb, rows)
				t.Logf("\n%s", sb.String())
			}
		})
	}
}
