package conformance

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
)

// pageKernelSpecs are variants with every page kernel and nothing else:
// page sizes 1 to 256, both layouts, GQA and MHA, head_dim qk != v, f32,
// f16 and bf16, 8-bit caches (e4m3, e5m2, i8; both scale kinds), a block
// table, and MLA caches (plain and 8-bit).
var pageKernelSpecs = []string{
	`variant pk_ps1_f32 { heads qo = 4, kv = 4
	  head_dim 16
	  dtype f32
	  cache paged(page_size = 1, layout = HND)
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_ps16_f16_nhd_gqa { heads qo = 8, kv = 2
	  head_dim qk = 32, v = 16
	  dtype f16
	  cache paged(page_size = 16, layout = NHD)
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_ps256_bf16 { heads qo = 2, kv = 1
	  head_dim 8
	  dtype bf16
	  cache paged(page_size = 256)
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_ps4_f16_e4m3_nhd { heads qo = 6, kv = 3
	  head_dim 16
	  dtype f16
	  cache paged(page_size = 4, layout = NHD, kv_dtype = e4m3, kv_scale = per_head)
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_ps8_bf16_e5m2_bt { heads qo = 4, kv = 2
	  head_dim qk = 16, v = 8
	  dtype bf16
	  cache paged(page_size = 8, table = block_table, kv_dtype = e5m2)
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_ps2_f32_i8_nhd { heads qo = 2, kv = 2
	  head_dim 8
	  dtype f32
	  cache paged(page_size = 2, layout = NHD, kv_dtype = i8, kv_scale = per_head)
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_ps32_f16_i8 { heads qo = 4, kv = 4
	  head_dim 8
	  dtype f16
	  cache paged(page_size = 32, kv_dtype = i8)
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_mla_ps16_f16 { mla(heads = 4, kv_lora_rank = 32, rope_dim = 16)
	  dtype f16
	  cache paged(page_size = 16)
	  scale 0.1
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_mla_ps1_bf16_e4m3 { mla(heads = 4, kv_lora_rank = 16, rope_dim = 8)
	  dtype bf16
	  cache paged(page_size = 1, kv_dtype = e4m3)
	  scale 0.1
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
	`variant pk_mla_ps64_f32_i8 { mla(heads = 2, kv_lora_rank = 16, rope_dim = 8)
	  dtype f32
	  cache paged(page_size = 64, table = block_table, kv_dtype = i8)
	  scale 0.1
	  kernels append, copy_page, compact_copy, read_kv, gather_pages, scatter_pages }`,
}

// pageKernelShort are the variants of pageKernelSpecs that run under
// qemu-aarch64 and on the CUDA emulator: f16 GQA over NHD, an e4m3 cache
// with per-head scales and an 8-bit MLA cache.
var pageKernelShort = []string{"pk_ps16_f16_nhd_gqa", "pk_ps4_f16_e4m3_nhd", "pk_mla_ps1_bf16_e4m3"}

// pageRoles are the roles pageKernelSpecs list.
var pageRoles = []ir.Role{ir.RoleAppend, ir.RoleCopyPage, ir.RoleCompactCopy, ir.RoleReadKV, ir.RoleGatherPages, ir.RoleScatterPages}

// runPageKernelSpecs builds every variant of pageKernelSpecs (those in only
// when not nil) with build and checks every page kernel case, on the
// targets that report bad tables (checksTables) the bad-input ones too;
// every role must have run a valid case and a bad one.
func runPageKernelSpecs(t *testing.T, only []string, build func(v *ir.Variant, dir string) (*Suite, error)) {
	var mu sync.Mutex
	counts := map[ir.Role]int{}
	t.Run("variants", func(t *testing.T) {
		for _, src := range pageKernelSpecs {
			v := spec(t, src)
			if only != nil && !slices.Contains(only, v.Name) {
				continue
			}
			t.Run(v.Name, func(t *testing.T) {
				t.Parallel()
				s, err := build(v, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				roleOf := map[string]ir.Role{}
				for r, e := range s.Entries {
					roleOf[e.Symbol] = r
				}
				valid, bad := map[ir.Role]int{}, map[ir.Role]int{}
				for _, r := range s.RunPageKernels(7) {
					if !r.Pass {
						t.Errorf("%s: %s", s.Target, r)
					}
					role := roleOf[r.Kernel]
					if strings.Contains(r.Note, "(want 0)") {
						valid[role]++
					} else {
						bad[role]++
					}
					mu.Lock()
					counts[role]++
					mu.Unlock()
				}
				for _, role := range pageRoles {
					if valid[role] == 0 || bad[role] == 0 {
						t.Errorf("%s: %s ran %d valid and %d bad-input cases: want both", s.Target, role, valid[role], bad[role])
					}
				}
			})
		}
	})
	t.Logf("page kernel cases per role: %v", counts)
}

// TestPageKernelMatrix runs every page kernel of pageKernelSpecs on this
// machine's CPU against the reference's byte models, bad inputs included.
func TestPageKernelMatrix(t *testing.T) {
	t.Parallel()
	needTools(t)
	runPageKernelSpecs(t, nil, buildHostLevel)
}

// TestPageKernelsAArch64 runs pageKernelShort's page kernels built for
// aarch64 under qemu.
func TestPageKernelsAArch64(t *testing.T) {
	t.Parallel()
	_, err := cpurt.ToolchainFor(aarch64)
	needtool.Check(t, err)
	runPageKernelSpecs(t, pageKernelShort, func(v *ir.Variant, dir string) (*Suite, error) {
		return BuildWith(v, dir, Options{Triple: aarch64})
	})
}

// TestPageKernelsCUDAEmulated runs pageKernelShort's page kernels through
// their CUDA launchers on the emulator: the valid cases and the bad
// scalars (a launcher cannot see a bad slot or page id in device memory;
// its kernels skip them).
func TestPageKernelsCUDAEmulated(t *testing.T) {
	t.Parallel()
	needEmu(t)
	runPageKernelSpecs(t, pageKernelShort, BuildCUDA)
}
