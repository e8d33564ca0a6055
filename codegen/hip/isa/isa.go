// Package isa compiles HIP C++ to AMDGPU assembly with clang and reads back
// what each kernel costs on the machine: registers (VGPRs, AGPRs, SGPRs),
// spills, scratch (private segment), LDS, instruction counts by opcode, and
// the occupancy these allow on a CDNA part (Arch). It is the AMD
// counterpart of codegen/cuda/sass; no GPU and no ROCm installation is
// needed, only clang-19.
//
// isa imports the standard library only.
package isa

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Kernel is one kernel's machine code for one architecture, as the
// assembly's code object metadata (.amdgpu_metadata) and its instructions
// report it.
type Kernel struct {
	Name string
	Arch string // "gfx942"
	// VGPRs is .vgpr_count: vector registers per work-item, on gfx90a and
	// gfx94x the unified file (architectural VGPRs, then the accumulation
	// registers from .amdhsa_accum_offset on); AGPRs is .agpr_count, part
	// of it.
	VGPRs, AGPRs int
	SGPRs        int // .sgpr_count: scalar registers per wavefront, VCC and XNACK included
	VGPRSpills   int // .vgpr_spill_count: VGPRs spilled to scratch
	SGPRSpills   int // .sgpr_spill_count: SGPRs spilled (to VGPR lanes or scratch)
	// Scratch is .private_segment_fixed_size: bytes of private (scratch)
	// memory per work-item the code addresses itself — spills, and arrays
	// the compiler could not keep in registers.
	Scratch      int
	DynamicStack bool // .uses_dynamic_stack
	LDS          int  // .group_segment_fixed_size: static LDS bytes; dynamic LDS comes with the launch
	MaxBlock     int  // .max_flat_workgroup_size
	Wavefront    int  // .wavefront_size
	// Occupancy is LLVM's estimate in the assembly's comments (waves per
	// SIMD from the registers and the static LDS, at MaxBlock); 0 if absent.
	Occupancy    int
	Opcodes      map[string]int // instruction count by mnemonic ("v_mfma_f32_16x16x16_f16")
	Instructions int
	// Args are the kernel's arguments as the code object lays them out in
	// its argument segment (.args), the hidden ones (launch sizes) included.
	Args []Arg
}

// Arg is one argument of a kernel's argument segment: its byte offset and
// size, and its .value_kind ("global_buffer", "by_value", "hidden_...").
type Arg struct {
	Offset, Size int
	Kind         string
}

// Explicit are the arguments of the kernel's own parameters, in order:
// Args without the hidden ones the runtime appends.
func (k Kernel) Explicit() []Arg {
	var out []Arg
	for _, a := range k.Args {
		if !strings.HasPrefix(a.Kind, "hidden_") {
			out = append(out, a)
		}
	}
	return out
}

// Count returns how many instructions have a mnemonic that starts with
// prefix: "v_mfma" counts every MFMA, "scratch_store" every store to
// scratch, "ds_bpermute_b32" that one instruction.
func (k Kernel) Count(prefix string) int {
	n := 0
	for op, c := range k.Opcodes {
		if strings.HasPrefix(op, prefix) {
			n += c
		}
	}
	return n
}

// Families are the instruction groups the tables report (Count's rule):
// MFMA, the f16 and bf16 16x16x16 MFMA, LDS reads and writes, wavefront
// permutes (the shuffles), barriers, 128-bit global loads, and scratch
// loads and stores (spills or private arrays).
var Families = []string{
	"v_mfma", "v_mfma_f32_16x16x16_f16", "v_mfma_f32_16x16x16_bf16",
	"ds_read", "ds_write", "ds_bpermute", "s_barrier", "global_load_dwordx4",
	"scratch_load", "scratch_store",
}

var archRE = regexp.MustCompile(`^gfx9(4[0-2]|0a)$`)

// Flags returns the clang flags Compile uses for arch (gfx942, or the
// other CDNA parts with the same MFMA instructions: gfx940, gfx941,
// gfx90a), without the input and output names.
func Flags(arch string) ([]string, error) {
	if !archRE.MatchString(arch) {
		return nil, fmt.Errorf("isa: bad GPU architecture %q (want gfx942, or gfx940, gfx941, gfx90a)", arch)
	}
	return []string{"-x", "hip", "--offload-arch=" + arch, "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3", "-S"}, nil
}

// Compile compiles hipPath (HIP C++ that needs no ROCm file, like attnc's
// .hip) to AMDGPU assembly for arch with clang:
//
//	clang -x hip --offload-arch=<arch> -nogpulib -nogpuinc --cuda-device-only -O3 -S -o asmPath hipPath
//
// and returns every kernel, sorted by name. The error carries the
// compiler's output.
func Compile(clang, hipPath, asmPath, arch string) ([]Kernel, error) {
	flags, err := Flags(arch)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(clang, append(flags, "-o", asmPath, hipPath)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("isa: %s %s: %v\n%s", filepath.Base(clang), strings.Join(cmd.Args[1:], " "), err,
			strings.TrimSpace(out.String()))
	}
	text, err := os.ReadFile(asmPath)
	if err != nil {
		return nil, err
	}
	return Parse(string(text))
}

var (
	targetRE    = regexp.MustCompile(`\.amdgcn_target\s+"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)`)
	labelRE     = regexp.MustCompile(`^([A-Za-z_][\w.$]*):`)
	occupancyRE = regexp.MustCompile(`^; Occupancy: (\d+)`)
)

// Parse reads the kernels of one AMDGPU assembly file (clang -S for an
// amdhsa target): the per-kernel fields of its .amdgpu_metadata block, and
// the instructions between each kernel's label and its .Lfunc_end label.
// A file without metadata, or a kernel in the metadata without code, is an
// error.
func Parse(text string) ([]Kernel, error) {
	arch := ""
	if m := targetRE.FindStringSubmatch(text); m != nil {
		arch = m[1]
	}
	meta, err := parseMetadata(text)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Kernel{}
	for i := range meta {
		meta[i].Arch = arch
		meta[i].Opcodes = map[string]int{}
		byName[meta[i].Name] = &meta[i]
	}
	// Instructions, per function body.
	var cur *Kernel
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Text()
		if m := labelRE.FindStringSubmatch(line); m != nil {
			switch {
			case byName[m[1]] != nil:
				cur = byName[m[1]]
				seen[m[1]] = true
			case strings.HasPrefix(m[1], ".Lfunc_end"):
				cur = nil
			}
			continue
		}
		if cur == nil || len(line) < 2 || line[0] != '\t' {
			continue
		}
		f := strings.Fields(line)
		op := f[0]
		if op[0] < 'a' || op[0] > 'z' || !strings.Contains(op, "_") {
			continue // directives (.p2align), comments, labels
		}
		cur.Opcodes[op]++
		cur.Instructions++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for name, k := range byName {
		if !seen[name] {
			return nil, fmt.Errorf("isa: kernel %s is in the metadata but has no code", name)
		}
		k.Occupancy = infoOccupancy(text, name)
	}
	sort.Slice(meta, func(i, j int) bool { return meta[i].Name < meta[j].Name })
	return meta, nil
}

// infoOccupancy finds "; Occupancy: N" in the "; Kernel info:" block after
// kernel name's .Lfunc_end (LLVM prints it once per function, after the
// end label).
func infoOccupancy(text, name string) int {
	i := strings.Index(text, "\n"+name+":")
	if i < 0 {
		return 0
	}
	rest := text[i:]
	j := strings.Index(rest, "; Kernel info:")
	if j < 0 {
		return 0
	}
	rest = rest[j:]
	if k := strings.Index(rest, "\n\t.end_amdhsa_kernel"); k >= 0 {
		rest = rest[:k]
	}
	for _, l := range strings.Split(rest, "\n") {
		if m := occupancyRE.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// parseMetadata reads the amdhsa.kernels list of the YAML between
// .amdgpu_metadata and .end_amdgpu_metadata: each "  - " item at the
// list's indentation starts a kernel; its ".key: value" lines at the
// item's own indentation are its fields (the nested .args are skipped).
func parseMetadata(text string) ([]Kernel, error) {
	start := strings.Index(text, ".amdgpu_metadata")
	end := strings.Index(text, ".end_amdgpu_metadata")
	if start < 0 || end < start {
		return nil, fmt.Errorf("isa: no .amdgpu_metadata block (not clang -S output for an amdhsa target?)")
	}
	var ks []Kernel
	in, inArgs := false, false
	fieldIndent := -1
	for _, line := range strings.Split(text[start:end], "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if strings.HasPrefix(line, "amdhsa.kernels:") {
			in = true
			continue
		}
		if !in {
			continue
		}
		if indent == 0 && trimmed != "" && !strings.HasPrefix(trimmed, "-") {
			in = false // the next top-level key (amdhsa.target, amdhsa.version)
			continue
		}
		if strings.HasPrefix(trimmed, "- ") && (fieldIndent < 0 || indent+2 == fieldIndent) {
			ks = append(ks, Kernel{})
			fieldIndent = indent + 2
			inArgs = false
			trimmed = strings.TrimPrefix(trimmed, "- ")
			indent = fieldIndent
		}
		if len(ks) == 0 {
			continue
		}
		k := &ks[len(ks)-1]
		if inArgs && indent > fieldIndent {
			// An .args item: "- " at the list's indentation starts it,
			// its fields are at the item's.
			if strings.HasPrefix(trimmed, "- ") && indent == fieldIndent+2 {
				k.Args = append(k.Args, Arg{Offset: -1, Size: -1})
				trimmed = strings.TrimPrefix(trimmed, "- ")
				indent += 2
			}
			if key, val, ok := strings.Cut(trimmed, ":"); ok && indent == fieldIndent+4 && len(k.Args) > 0 {
				a := &k.Args[len(k.Args)-1]
				val = strings.TrimSpace(val)
				switch key {
				case ".offset":
					a.Offset = atoi(val)
				case ".size":
					a.Size = atoi(val)
				case ".value_kind":
					a.Kind = val
				}
			}
			continue
		}
		if indent != fieldIndent || !strings.HasPrefix(trimmed, ".") {
			continue
		}
		key, val, ok := strings.Cut(trimmed, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		inArgs = key == ".args"
		num := func() int { return atoi(val) }
		switch key {
		case ".name":
			k.Name = strings.Trim(val, `"'`)
		case ".vgpr_count":
			k.VGPRs = num()
		case ".agpr_count":
			k.AGPRs = num()
		case ".sgpr_count":
			k.SGPRs = num()
		case ".vgpr_spill_count":
			k.VGPRSpills = num()
		case ".sgpr_spill_count":
			k.SGPRSpills = num()
		case ".private_segment_fixed_size":
			k.Scratch = num()
		case ".group_segment_fixed_size":
			k.LDS = num()
		case ".max_flat_workgroup_size":
			k.MaxBlock = num()
		case ".wavefront_size":
			k.Wavefront = num()
		case ".uses_dynamic_stack":
			k.DynamicStack = val == "true"
		}
	}
	for _, k := range ks {
		if k.Name == "" {
			return nil, fmt.Errorf("isa: a kernel in the metadata has no .name")
		}
		for i, a := range k.Args {
			if a.Offset < 0 || a.Size < 0 || a.Kind == "" {
				return nil, fmt.Errorf("isa: kernel %s: argument %d has no .offset, .size or .value_kind", k.Name, i)
			}
		}
		for f, v := range map[string]int{".vgpr_count": k.VGPRs, ".sgpr_count": k.SGPRs, ".private_segment_fixed_size": k.Scratch,
			".group_segment_fixed_size": k.LDS, ".vgpr_spill_count": k.VGPRSpills, ".sgpr_spill_count": k.SGPRSpills} {
			if v < 0 {
				return nil, fmt.Errorf("isa: kernel %s: %s is not a number", k.Name, f)
			}
		}
	}
	return ks, nil
}

// atoi is the number val, or -1.
func atoi(val string) int {
	n, err := strconv.Atoi(val)
	if err != nil {
		return -1
	}
	return n
}
