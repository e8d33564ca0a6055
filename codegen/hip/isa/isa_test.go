package isa

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
)

func clang(t *testing.T) string {
	t.Helper()
	for _, c := range []string{os.Getenv("ATTNC_CLANG"), "clang++-19", "/usr/lib/llvm-19/bin/clang++"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	needtool.Check(t, fmt.Errorf("clang++-19 not found"))
	return ""
}

func compileProbe(t *testing.T) map[string]Kernel {
	t.Helper()
	ks, err := Compile(clang(t), filepath.Join("testdata", "probe.hip"), filepath.Join(t.TempDir(), "probe.s"), "gfx942")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Kernel{}
	for _, k := range ks {
		m[k.Name] = k
	}
	return m
}

// The probe's kernels were written to have known costs: one clean, one
// that must spill, one with a private array in scratch but no spill, one
// with static LDS and an MFMA.
func TestCompileProbe(t *testing.T) {
	ks := compileProbe(t)
	var names []string
	for n := range ks {
		names = append(names, n)
	}
	if want := []string{"k_clean", "k_lds_mfma", "k_private", "k_spill"}; len(ks) != len(want) {
		t.Fatalf("kernels %v, want %v", names, want)
	}
	for n, k := range ks {
		if k.Arch != "gfx942" || k.Wavefront != 64 || k.MaxBlock != 1024 || k.Instructions == 0 || k.Occupancy == 0 {
			t.Errorf("%s: arch %q, wavefront %d, max block %d, %d instructions, occupancy %d", n, k.Arch, k.Wavefront,
				k.MaxBlock, k.Instructions, k.Occupancy)
		}
		if k.VGPRs <= 0 || k.SGPRs <= 0 {
			t.Errorf("%s: %d VGPRs, %d SGPRs", n, k.VGPRs, k.SGPRs)
		}
		if k.Count("s_endpgm") != 1 {
			t.Errorf("%s: %d s_endpgm, want 1 (the body was read from its label to its end)", n, k.Count("s_endpgm"))
		}
	}
	clean := ks["k_clean"]
	if clean.Scratch != 0 || clean.VGPRSpills != 0 || clean.SGPRSpills != 0 || clean.LDS != 0 || clean.Count("v_mfma") != 0 {
		t.Errorf("k_clean: %+v", clean)
	}
	spill := ks["k_spill"]
	if spill.VGPRSpills == 0 || spill.Scratch == 0 || spill.Count("scratch_store")+spill.Count("buffer_store") == 0 {
		t.Errorf("k_spill: %d VGPR spills, %d bytes of scratch, %d scratch stores: want a spill",
			spill.VGPRSpills, spill.Scratch, spill.Count("scratch_store"))
	}
	priv := ks["k_private"]
	if priv.Scratch < 64*4 || priv.VGPRSpills != 0 {
		t.Errorf("k_private: %d bytes of scratch, %d spills: want the 256-byte array in scratch and no spill",
			priv.Scratch, priv.VGPRSpills)
	}
	lm := ks["k_lds_mfma"]
	if lm.LDS != 4096 || lm.Count("v_mfma_f32_16x16x16_f16") != 1 || lm.Count("v_mfma") != 1 || lm.Count("s_barrier") != 1 {
		t.Errorf("k_lds_mfma: LDS %d, %d v_mfma_f32_16x16x16_f16, %d barriers", lm.LDS,
			lm.Count("v_mfma_f32_16x16x16_f16"), lm.Count("s_barrier"))
	}
	// Our occupancy at the kernel's own maximum workgroup agrees with
	// LLVM's comment (which counts registers and static LDS at it).
	for n, k := range ks {
		o, err := Archs["gfx942"].Occupancy(k.VGPRs, k.SGPRs, k.LDS, k.MaxBlock, 0)
		if err != nil {
			t.Fatal(err)
		}
		if o.WavesPerSIMD != k.Occupancy {
			t.Errorf("%s: %d waves per SIMD, LLVM says %d (%d VGPRs, %d SGPRs)", n, o.WavesPerSIMD, k.Occupancy, k.VGPRs, k.SGPRs)
		}
	}
}

// parseText is a two-kernel assembly file in clang's layout, trimmed.
const parseText = `	.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
	.globl	k_a
k_a:                                    ; @k_a
; %bb.0:
	s_load_dwordx2 s[0:1], s[0:1], 0x0
	v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[0:1], 0
	v_mfma_f32_16x16x16_bf16 a[0:3], v[2:3], v[2:3], a[0:3]
	scratch_store_dword off, v1, s0 offset:4 ; 4-byte Folded Spill
.LBB0_1:
	v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[0:1], a[0:3]
	s_endpgm
.Lfunc_end0:
	.size	k_a, .Lfunc_end0-k_a
; Kernel info:
; NumVgprs: 20
; Occupancy: 7
	.section	.rodata,"a",@progbits
	.amdhsa_kernel k_a
	.end_amdhsa_kernel
	.text
	.globl	k_b
k_b:
	s_endpgm
.Lfunc_end1:
; Kernel info:
; Occupancy: 8
	.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     4
    .args:
      - .address_space:  global
        .name:           not_a_kernel
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .offset:         8
        .size:           4
        .value_kind:     hidden_block_count_x
    .group_segment_fixed_size: 8192
    .max_flat_workgroup_size: 256
    .name:           k_a
    .private_segment_fixed_size: 8
    .sgpr_count:     22
    .sgpr_spill_count: 1
    .uses_dynamic_stack: false
    .vgpr_count:     72
    .vgpr_spill_count: 2
    .wavefront_size: 64
  - .agpr_count:     0
    .args:           []
    .group_segment_fixed_size: 0
    .max_flat_workgroup_size: 1024
    .name:           k_b
    .private_segment_fixed_size: 0
    .sgpr_count:     6
    .sgpr_spill_count: 0
    .uses_dynamic_stack: true
    .vgpr_count:     1
    .vgpr_spill_count: 0
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx942
amdhsa.version:
  - 1
  - 2
...

	.end_amdgpu_metadata
`

func TestParse(t *testing.T) {
	ks, err := Parse(parseText)
	if err != nil {
		t.Fatal(err)
	}
	want := []Kernel{
		{Name: "k_a", Arch: "gfx942", VGPRs: 72, AGPRs: 4, SGPRs: 22, VGPRSpills: 2, SGPRSpills: 1, Scratch: 8,
			LDS: 8192, MaxBlock: 256, Wavefront: 64, Occupancy: 7, Instructions: 6,
			Opcodes: map[string]int{"s_load_dwordx2": 1, "v_mfma_f32_16x16x16_f16": 2, "v_mfma_f32_16x16x16_bf16": 1,
				"scratch_store_dword": 1, "s_endpgm": 1},
			Args: []Arg{{Offset: 0, Size: 8, Kind: "global_buffer"}, {Offset: 8, Size: 4, Kind: "hidden_block_count_x"}}},
		{Name: "k_b", Arch: "gfx942", VGPRs: 1, SGPRs: 6, DynamicStack: true, MaxBlock: 1024, Wavefront: 64,
			Occupancy: 8, Instructions: 1, Opcodes: map[string]int{"s_endpgm": 1}},
	}
	if !reflect.DeepEqual(ks, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", ks, want)
	}
	if n := ks[0].Count("v_mfma"); n != 3 {
		t.Errorf("Count(v_mfma) = %d, want 3", n)
	}
	if e := ks[0].Explicit(); !reflect.DeepEqual(e, ks[0].Args[:1]) {
		t.Errorf("Explicit() = %+v, want the global buffer only", e)
	}
	for _, bad := range []string{
		"no metadata",
		strings.Replace(parseText, "k_b:\n", "k_c:\n", 1), // k_b without code
		strings.Replace(parseText, ".vgpr_count:     72", ".vgpr_count:     x", 1),
		strings.Replace(parseText, ".size:           4", ".size:           y", 1),
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse accepted %.40q...", bad)
		}
	}
}

func TestOccupancy(t *testing.T) {
	a := Archs["gfx942"]
	for _, c := range []struct {
		vgprs, sgprs, lds, block, dyn int
		groups, perSIMD               int
		limiters                      string
	}{
		// 128 VGPRs leave 4 waves per SIMD: 16 waves per CU, 4 groups of 4.
		{128, 30, 0, 256, 0, 4, 4, "VGPRs"},
		// 40000 bytes of LDS (40448 allocated) fit once in 64 KiB.
		{64, 30, 8000, 256, 32000, 1, 1, "LDS"},
		// One-wavefront groups: the 32 slots bound them (24 VGPRs would allow 21 per SIMD).
		{24, 30, 0, 64, 0, 32, 8, "waves"},
		// 2-wavefront groups of few registers: 16 groups (barriers), 32 waves.
		{16, 30, 0, 128, 0, 16, 8, "waves+workgroups"},
		// 512 VGPRs: one wave per SIMD; a 4-wave group needs all four SIMDs.
		{512, 30, 0, 256, 0, 1, 1, "VGPRs"},
		// 104 SGPRs (112 allocated) leave 7 waves per SIMD: 7 groups of 4 waves.
		{32, 104, 0, 256, 0, 7, 7, "SGPRs"},
	} {
		o, err := a.Occupancy(c.vgprs, c.sgprs, c.lds, c.block, c.dyn)
		if err != nil {
			t.Fatal(err)
		}
		if o.GroupsPerCU != c.groups || o.WavesPerSIMD != c.perSIMD || strings.Join(o.Limiters, "+") != c.limiters {
			t.Errorf("%+v: %s", c, o)
		}
	}
	for _, c := range [][5]int{{32, 10, 0, 2048, 0}, {600, 10, 0, 64, 0}, {32, 10, 0, 64, 65537}, {32, 10, 32768, 64, 32768 + 1}} {
		if _, err := a.Occupancy(c[0], c[1], c[2], c[3], c[4]); err == nil {
			t.Errorf("Occupancy%v accepted", c)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, bad := range []string{"", "gfx1100", "sm_90", "gfx942 ", "gfx9420"} {
		if _, err := Flags(bad); err == nil {
			t.Errorf("Flags(%q) accepted", bad)
		}
	}
	if _, err := Compile("clang", "x.hip", "x.s", "gfx1100"); err == nil {
		t.Errorf("Compile accepted gfx1100")
	}
}
