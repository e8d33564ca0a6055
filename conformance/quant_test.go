package conformance

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnc/attnc/ir"
)

// appendOnly is a variant with only the append kernel: q dtype dt, an
// 8-bit cache of kv dtype code with scale kind kind, 3 kv heads (per-head
// scales 1, 1/2, 1/4), page size 8.
func appendOnly(dt, code, kind string) string {
	return fmt.Sprintf(`variant append_%s_%s_%s { heads qo = 3, kv = 3
	  head_dim 64
	  dtype %s
	  cache paged(page_size = 8, kv_dtype = %s, kv_scale = %s)
	  kernels append }`, dt, code, kind, dt, code, kind)
}

// TestAppendQuantizerEdges runs append's cases — the random rows and the
// edge inputs (reference.QuantEdges: every code value and every tie
// between neighbours, with one ulp of the input dtype either side, the
// largest finite value and beyond, ±inf, NaN of both signs, ±0, the fp8
// subnormal range and f32 subnormals) — for every input dtype (f32, f16,
// bf16), every 8-bit code (e4m3, e5m2, i8) and both scale kinds, on the
// CPU kernels and, one code per input dtype, the CUDA launchers under the
// emulator: the cache must hold reference.Quantize's codes, bit for bit.
func TestAppendQuantizerEdges(t *testing.T) {
	t.Parallel()
	dts := []string{"f32", "f16", "bf16"}
	codes := ir.DTypeNames(true)
	for i, dt := range dts {
		for j, code := range codes {
			for _, kind := range []string{"per_tensor", "per_head"} {
				v := spec(t, appendOnly(dt, code, kind))
				emulate := j == i%len(codes) && kind == "per_head"
				t.Run(strings.TrimPrefix(v.Name, "append_"), func(t *testing.T) {
					t.Parallel()
					targets := []string{"cpu"}
					if emulate {
						targets = append(targets, "cuda")
					}
					for _, target := range targets {
						var s *Suite
						var err error
						if target == "cpu" {
							needTools(t)
							s, err = buildHostLevel(v, t.TempDir())
						} else {
							needEmu(t)
							s, err = BuildCUDA(v, t.TempDir())
						}
						if err != nil {
							t.Fatal(err)
						}
						rs := s.RunPageKernels(5)
						s.Lib.Close()
						edges := false
						for _, r := range rs {
							if !r.Pass {
								t.Errorf("%s: %s", target, r)
							}
							edges = edges || strings.Contains(r.Case, "edges")
						}
						if !edges {
							t.Errorf("%s: no edge case ran", target)
						}
					}
				})
			}
		}
	}
}
