package sass

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/attnc/attnc/internal/needtool"
)

// ptxasInfo is `ptxas -v` output (CUDA 11.8) with a callee's properties
// between an entry's header and its own, spills, and static shared memory.
const ptxasInfo = `ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_spill' for 'sm_80'
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for k_spill
    200 bytes stack frame, 120 bytes spill stores, 96 bytes spill loads
ptxas info    : Used 255 registers, 256 bytes smem, 388 bytes cmem[0], 32 bytes cmem[2]
ptxas info    : Compiling entry function 'k_plain' for 'sm_80'
ptxas info    : Function properties for k_plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 25 registers, 388 bytes cmem[0]
`

func TestParsePTXASInfo(t *testing.T) {
	ks, err := ParsePTXASInfo(ptxasInfo)
	if err != nil {
		t.Fatal(err)
	}
	want := []Kernel{
		{Name: "k_spill", Arch: "sm_80", Registers: 255, StackFrame: 200, SpillStores: 120, SpillLoads: 96, StaticSmem: 256},
		{Name: "k_plain", Arch: "sm_80", Registers: 25},
	}
	if !reflect.DeepEqual(ks, want) {
		t.Errorf("ParsePTXASInfo =\n%+v\nwant\n%+v", ks, want)
	}
	for _, bad := range []string{
		"",
		"ptxas info    : 0 bytes gmem\n",
		"ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n",
	} {
		if _, err := ParsePTXASInfo(bad); err == nil {
			t.Errorf("ParsePTXASInfo(%q) succeeded", bad)
		}
	}
}

// sassText is `cuobjdump -sass` output (CUDA 11.8, sm_90) cut short.
const sassText = `
	code for sm_90
		Function : k_b
	.headerflags    @"EF_CUDA_SM90 EF_CUDA_PTX_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                   /* 0x00000a00ff017b82 */
                                                                                            /* 0x000e240000000800 */
        /*0050*/               @P0 EXIT ;                                                   /* 0x000000000000094d */
                                                                                            /* 0x000fea0003800000 */
        /*00d0*/                   LDGSTS.E.BYPASS.128 [R9], [R2.64] ;                      /* 0x0000000002097fae */
        /*0110*/                   LDSM.16.MT88.2 R4, [R7+UR4] ;                            /* 0x000000040704783b */
        /*0120*/                   LDSM.16.M88.4 R12, [R7+UR4] ;                            /* 0x00000004070c783b */
        /*0130*/                   HMMA.16816.F32.BF16 R16, R12, R4, RZ ;                   /* 0x000000040c10723c */
        /*0140*/              @!P1 LDG.E.128.CONSTANT R4, [R2.64] ;                         /* 0x0000000402047981 */
        /*0150*/                   LDG.E.128 R8, [R2.64+0x10] ;                             /* 0x0000100402087981 */
        /*0160*/                   LDG.E R8, [R2.64] ;                                      /* 0x0000000402087981 */
        /*0170*/                   STL.U8 [R1+0x3], RZ ;                                    /* 0x000003ff01007387 */
        /*0180*/                   STL.64 [R1], R4 ;                                        /* 0x0000000401007387 */
        /*0190*/             @!UPT UIADD3 UR4, UR4, 0x1, URZ ;                              /* 0x0000000104047890 */
        /*01a0*/                   BRA 0x1a0;                                               /* 0xfffffffc00fc7947 */
		..........


		Function : k_a
	.headerflags    @"EF_CUDA_SM90 EF_CUDA_PTX_SM(EF_CUDA_SM90)"
        /*0000*/                   LDS.U16 R1, [R2] ;                                       /* 0x00000a00ff017b82 */
        /*0010*/                   LDS.U16 R3, [R2+0x2] ;                                   /* 0x00000a00ff017b82 */
        /*0020*/                   LDS R3, [R2+0x4] ;                                       /* 0x00000a00ff017b82 */
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                            /* 0x0000000000007b1d */
        /*0040*/                   NOP;                                                     /* 0x0000000000007918 */
`

func TestParseSASS(t *testing.T) {
	got := ParseSASS(sassText)
	want := map[string]map[string]int{
		"k_b": {"LDC": 1, "EXIT": 1, "LDGSTS.E.BYPASS.128": 1, "LDSM.16.MT88.2": 1, "LDSM.16.M88.4": 1,
			"HMMA.16816.F32.BF16": 1, "LDG.E.128.CONSTANT": 1, "LDG.E.128": 1, "LDG.E": 1, "STL.U8": 1, "STL.64": 1,
			"UIADD3": 1, "BRA": 1},
		"k_a": {"LDS.U16": 2, "LDS": 1, "BAR.SYNC.DEFER_BLOCKING": 1, "NOP": 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseSASS =\n%v\nwant\n%v", got, want)
	}
	b := Kernel{Opcodes: got["k_b"]}
	a := Kernel{Opcodes: got["k_a"]}
	for _, c := range []struct {
		k      *Kernel
		family string
		want   int
	}{
		{&b, "LDGSTS", 1}, {&b, "LDSM", 2}, {&b, "LDSM.MT88", 1}, {&b, "HMMA", 1}, {&b, "HMMA.BF16", 1},
		{&b, "LDG", 3}, {&b, "LDG.128", 2}, {&b, "LDG.E.128", 2}, {&b, "LDG.CONSTANT", 1},
		{&b, "STL", 2}, {&b, "LDL", 0}, {&b, "ST", 0}, {&b, "LD", 0},
		{&a, "LDS", 3}, {&a, "LDS.U16", 2}, {&a, "BAR", 1}, {&a, "SHFL", 0},
	} {
		if n := c.k.Count(c.family); n != c.want {
			t.Errorf("Count(%q) = %d, want %d", c.family, n, c.want)
		}
	}
}

func TestOccupancy(t *testing.T) {
	// Each case worked by hand from the limits in Arch's comment.
	cases := []struct {
		arch                   string
		regs, smem, block, dyn int
		blocks                 int
		limiters               string
	}{
		// 103 regs -> 3296 -> 3328 per warp; 16384/3328 = 4 warps per
		// sub-partition, 16 per SM = 4 blocks of 4 warps. Shared memory:
		// 23744 + 1024 = 24768 -> 24832; 167936/24832 = 6.
		{"sm_80", 103, 0, 128, 23744, 4, "registers"},
		// sm_90 has 233472 bytes: 9 blocks by shared memory.
		{"sm_90", 96, 0, 128, 23744, 5, "registers"}, // 96*32 = 3072: 5 warps per sub-partition -> 20 warps
		{"sm_90", 32, 0, 128, 23744, 9, "shared memory"},
		// 32 regs, 256 threads: 1024 per warp, 16 warps per sub-partition:
		// 64 warps = 8 blocks, also the warp limit.
		{"sm_80", 32, 0, 256, 0, 8, "warps+registers"},
		// Tiny blocks: the 32-block limit.
		{"sm_90", 16, 0, 32, 0, 32, "blocks"},
		// 64 regs x 1024 threads use the whole register file (the warp
		// limit would allow 2 blocks).
		{"sm_80", 64, 0, 1024, 0, 1, "registers"},
		// 100 KB of dynamic shared memory + 1 KB: one block on sm_80
		// (164 KB), two on sm_90 (228 KB).
		{"sm_80", 32, 0, 128, 100 << 10, 1, "shared memory"},
		{"sm_90", 32, 0, 128, 100 << 10, 2, "shared memory"},
		// Static shared memory counts too: 512 + 48 KB + 1 KB -> 50688; 167936/50688 = 3.
		{"sm_80", 32, 512, 128, 48 << 10, 3, "shared memory"},
		// No registers reported: no register limit; 2-warp blocks reach the
		// warp and block limits together.
		{"sm_80", 0, 0, 64, 0, 32, "warps+blocks"},
	}
	for _, c := range cases {
		o, err := Archs[c.arch].Occupancy(c.regs, c.smem, c.block, c.dyn)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		if o.BlocksPerSM != c.blocks || strings.Join(o.Limiters, "+") != c.limiters {
			t.Errorf("%s regs=%d smem=%d block=%d dyn=%d: %v, want %d blocks limited by %s",
				c.arch, c.regs, c.smem, c.block, c.dyn, o, c.blocks, c.limiters)
		}
		if o.WarpsPerSM != o.BlocksPerSM*((c.block+31)/32) || o.Fraction != float64(o.WarpsPerSM)/64 {
			t.Errorf("%+v: inconsistent %+v", c, o)
		}
	}
	for _, bad := range []struct{ regs, smem, block, dyn int }{
		{32, 0, 0, 0}, {32, 0, 1025, 0}, {256, 0, 32, 0},
		{128, 0, 1024, 0},             // 128 x 1024 registers > 64K
		{32, 0, 128, 163<<10 + 1},     // over sm_80's opt-in limit
		{32, 1 << 10, 128, 163 << 10}, // static + dynamic over it
		{32, 0, 128, -1},
	} {
		if o, err := Archs["sm_80"].Occupancy(bad.regs, bad.smem, bad.block, bad.dyn); err == nil {
			t.Errorf("Occupancy%+v = %v, want an error", bad, o)
		}
	}
	if got := ArchNames(); !reflect.DeepEqual(got, []string{"sm_80", "sm_90"}) {
		t.Errorf("ArchNames() = %v", got)
	}
}

// needTools returns the tools, or skips (fails in CI) without them.
func needTools(t *testing.T) Tools {
	t.Helper()
	tools, err := FindTools()
	needtool.Check(t, err)
	return tools
}

func TestAssembleProbe(t *testing.T) {
	tools := needTools(t)
	t.Logf("ptxas %s (CUDA %s), cuobjdump %s", tools.PTXAS, tools.Release, tools.Cuobjdump)
	dir := t.TempDir()
	for _, arch := range []string{"sm_80", "sm_90"} {
		ks, err := Assemble(tools, filepath.Join("testdata", "probe.ptx"), arch, filepath.Join(dir, arch+".cubin"))
		if err != nil {
			t.Fatal(err)
		}
		if len(ks) != 2 || ks[0].Name != "probe_local" || ks[1].Name != "probe_tensor" {
			t.Fatalf("%s: kernels %+v", arch, ks)
		}
		local, tensor := ks[0], ks[1]
		if local.StackFrame != 64 || local.Count("LDL") == 0 || local.Count("STL") == 0 {
			t.Errorf("%s: probe_local: stack %d, LDL %d, STL %d; want a 64-byte frame with LDL and STL",
				arch, local.StackFrame, local.Count("LDL"), local.Count("STL"))
		}
		for _, f := range []string{"LDGSTS", "LDSM", "LDSM.MT88", "HMMA", "BAR", "SHFL"} {
			if tensor.Count(f) == 0 {
				t.Errorf("%s: probe_tensor has no %s:\n%v", arch, f, tensor.Opcodes)
			}
		}
		if tensor.StackFrame != 0 || tensor.Count("LDL")+tensor.Count("STL") != 0 || tensor.SpillStores != 0 {
			t.Errorf("%s: probe_tensor uses local memory: %+v", arch, tensor)
		}
		for _, k := range ks {
			if k.Arch != arch || k.Registers <= 0 || k.Instructions < 5 {
				t.Errorf("%s: implausible %+v", arch, k)
			}
			t.Logf("%s %s: %d registers, %d-byte stack frame, %d instructions", arch, k.Name, k.Registers,
				k.StackFrame, k.Instructions)
		}
	}
}

func TestAssembleErrors(t *testing.T) {
	tools := needTools(t)
	dir := t.TempDir()
	if _, err := Assemble(tools, "testdata/probe.ptx", "compute_90", filepath.Join(dir, "x.cubin")); err == nil {
		t.Errorf("Assemble with arch compute_90 succeeded")
	}
	bad := filepath.Join(dir, "bad.ptx")
	os.WriteFile(bad, []byte(".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry k() { no_such_op; ret; }\n"), 0o644)
	_, err := Assemble(tools, bad, "sm_90", filepath.Join(dir, "bad.cubin"))
	if err == nil || !strings.Contains(err.Error(), "ptxas") || !strings.Contains(err.Error(), "no_such_op") {
		t.Errorf("Assemble(bad PTX) error = %v, want ptxas's message", err)
	}
}

func TestFindToolsFromEnvironment(t *testing.T) {
	t.Setenv("ATTNC_PTXAS", filepath.Join(t.TempDir(), "no-ptxas"))
	if _, err := findTools(); err == nil || !strings.Contains(err.Error(), "ATTNC_PTXAS") ||
		!strings.Contains(err.Error(), "fetch-ptxas.sh") {
		t.Errorf("findTools with a missing $ATTNC_PTXAS: %v", err)
	}
	// A ptxas older than 11.8 is refused.
	dir := t.TempDir()
	old := filepath.Join(dir, "ptxas")
	os.WriteFile(old, []byte("#!/bin/sh\necho 'Cuda compilation tools, release 11.7, V11.7.64'\n"), 0o755)
	if _, err := checkRelease(old); err == nil || !strings.Contains(err.Error(), "11.8") {
		t.Errorf("checkRelease(11.7) = %v, want a refusal", err)
	}
	cur := filepath.Join(dir, "ptxas12")
	os.WriteFile(cur, []byte("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n"), 0o755)
	if r, err := checkRelease(cur); err != nil || r != "12.4" {
		t.Errorf("checkRelease(12.4) = %q, %v", r, err)
	}
	t.Setenv("ATTNC_CUDA_TOOLS_DIR", "/some/dir")
	if d := ToolsDir(); d != "/some/dir" {
		t.Errorf("ToolsDir() = %q with $ATTNC_CUDA_TOOLS_DIR=/some/dir", d)
	}
}
