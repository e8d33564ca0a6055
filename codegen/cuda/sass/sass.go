package sass

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Kernel is one kernel entry's machine code for one architecture, as
// `ptxas -v` and `cuobjdump -sass` report it.
type Kernel struct {
	Name         string
	Arch         string         // "sm_80", "sm_90"
	Registers    int            // per thread
	StackFrame   int            // bytes per thread (local memory the code addresses itself)
	SpillStores  int            // bytes per thread
	SpillLoads   int            // bytes per thread
	StaticSmem   int            // bytes of static shared memory; dynamic comes with the launch
	Opcodes      map[string]int // instruction count by opcode with its modifiers ("LDG.E.128.CONSTANT")
	Instructions int            // all instructions, NOPs included
}

// Count returns how many instructions belong to family: those whose opcode
// is family's first dot-separated part and has every other part of family
// among its modifiers, in any order. "LDL" counts LDL, LDL.64 and LDL.U8;
// "LDG.128" counts LDG.E.128 and LDG.E.128.CONSTANT; "LDS.U16" counts
// LDS.U16 but not LDS.
func (k Kernel) Count(family string) int {
	want := strings.Split(family, ".")
	n := 0
	for op, c := range k.Opcodes {
		parts := strings.Split(op, ".")
		if parts[0] != want[0] {
			continue
		}
		all := true
		for _, w := range want[1:] {
			if !contains(parts[1:], w) {
				all = false
				break
			}
		}
		if all {
			n += c
		}
	}
	return n
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Families are the opcode families the tables report (Count's rule):
// cp.async (LDGSTS), ldmatrix (LDSM), tensor-core mma (HMMA), local memory
// (LDL, STL), 128-bit global loads (LDG.128), 16-bit shared loads
// (LDS.U16), barriers (BAR) and warp shuffles (SHFL).
var Families = []string{"LDGSTS", "LDSM", "HMMA", "LDL", "STL", "LDG.128", "LDS.U16", "BAR", "SHFL"}

var archRE = regexp.MustCompile(`^sm_[0-9]+a?$`)

// Assemble assembles the PTX file ptxPath for arch ("sm_80", "sm_90") into
// cubinPath with `ptxas -arch=<arch> -v`, disassembles it with
// `cuobjdump -sass`, and returns every kernel entry, sorted by name. The
// error carries the tool's output.
func Assemble(t Tools, ptxPath, arch, cubinPath string) ([]Kernel, error) {
	if !archRE.MatchString(arch) {
		return nil, fmt.Errorf("sass: bad architecture %q (want sm_80, sm_90, ...)", arch)
	}
	info, err := run(t.PTXAS, "-arch="+arch, "-v", ptxPath, "-o", cubinPath)
	if err != nil {
		return nil, err
	}
	ks, err := ParsePTXASInfo(info)
	if err != nil {
		return nil, fmt.Errorf("sass: %s on %s: %w", filepath.Base(t.PTXAS), ptxPath, err)
	}
	dis, err := run(t.Cuobjdump, "-sass", cubinPath)
	if err != nil {
		return nil, err
	}
	ops := ParseSASS(dis)
	out := make([]Kernel, 0, len(ks))
	for _, k := range ks {
		if k.Arch != arch {
			return nil, fmt.Errorf("sass: ptxas compiled %s for %s, not %s", k.Name, k.Arch, arch)
		}
		o, ok := ops[k.Name]
		if !ok {
			return nil, fmt.Errorf("sass: cuobjdump -sass %s shows no code for the entry %s", cubinPath, k.Name)
		}
		k.Opcodes = o
		for _, c := range o {
			k.Instructions += c
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func run(tool string, args ...string) (string, error) {
	cmd := exec.Command(tool, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("sass: %s %s: %v\n%s", filepath.Base(tool), strings.Join(args, " "), err,
			strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

var (
	entryRE = regexp.MustCompile(`^ptxas info\s*: Compiling entry function '([^']+)' for '(sm_[0-9]+a?)'`)
	propsRE = regexp.MustCompile(`^ptxas info\s*: Function properties for (\S+)`)
	frameRE = regexp.MustCompile(`^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	usedRE  = regexp.MustCompile(`^ptxas info\s*: Used (\d+) registers(.*)`)
	smemRE  = regexp.MustCompile(`(\d+) bytes smem`)
)

// ParsePTXASInfo reads the output of `ptxas -v`: for every "Compiling
// entry function" the stack frame and spills of its "Function properties"
// and the registers and static shared memory of its "Used" line. Entries
// come back in the order ptxas compiled them; the Opcodes are not set.
func ParsePTXASInfo(text string) ([]Kernel, error) {
	var ks []Kernel
	cur := -1
	props := "" // whose "Function properties" the next frame line belongs to
	sawUsed := map[int]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if m := entryRE.FindStringSubmatch(line); m != nil {
			ks = append(ks, Kernel{Name: m[1], Arch: m[2]})
			cur = len(ks) - 1
			props = ""
			continue
		}
		if cur < 0 {
			continue
		}
		if m := propsRE.FindStringSubmatch(line); m != nil {
			props = m[1]
			continue
		}
		if m := frameRE.FindStringSubmatch(line); m != nil {
			if props == ks[cur].Name {
				ks[cur].StackFrame = atoi(m[1])
				ks[cur].SpillStores = atoi(m[2])
				ks[cur].SpillLoads = atoi(m[3])
			}
			props = ""
			continue
		}
		if m := usedRE.FindStringSubmatch(line); m != nil {
			ks[cur].Registers = atoi(m[1])
			if s := smemRE.FindStringSubmatch(m[2]); s != nil {
				ks[cur].StaticSmem = atoi(s[1])
			}
			sawUsed[cur] = true
		}
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("no \"Compiling entry function\" in the ptxas -v output:\n%s", strings.TrimSpace(text))
	}
	for i, k := range ks {
		if !sawUsed[i] {
			return nil, fmt.Errorf("no \"Used N registers\" line for the entry %s in the ptxas -v output", k.Name)
		}
	}
	return ks, nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

var (
	functionRE = regexp.MustCompile(`^\s*Function\s*:\s*(\S+)`)
	// An instruction line: /*0123*/, an optional predicate, the opcode.
	insnRE = regexp.MustCompile(`^\s*/\*[0-9a-f]+\*/\s*(?:\{\s*)?(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)`)
)

// ParseSASS reads the output of `cuobjdump -sass` (or `nvdisasm`) and
// returns every function's instruction counts by opcode (with modifiers,
// without predicate and operands).
func ParseSASS(text string) map[string]map[string]int {
	out := map[string]map[string]int{}
	var cur map[string]int
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := functionRE.FindStringSubmatch(line); m != nil {
			cur = map[string]int{}
			out[m[1]] = cur
			continue
		}
		if cur == nil {
			continue
		}
		if m := insnRE.FindStringSubmatch(line); m != nil {
			cur[m[1]]++
		}
	}
	return out
}
