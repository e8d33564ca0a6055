package targets

import (
	"fmt"
	"io"
	"strings"

	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/registry"
)

// The hooks below are optional interfaces a Target implements, the way a
// database/sql driver implements driver.Pinger: the driver, the command
// line, conformance and bench ask a target for what it offers (a triple
// option, a worker count, a harness, a machine-code check) instead of
// comparing its name. A target that lacks a hook simply does not offer
// that facility.

// Triples is implemented by a target that compiles for LLVM target triples
// (the CPU): it owns --triple, Options.Triple and the one validation of a
// triple.
type Triples interface {
	// Triples lists the triples it compiles for; the first is the default,
	// which "" selects.
	Triples() []string
	// CheckTriple returns an error naming the known triples when it
	// cannot compile for triple ("" is the default).
	CheckTriple(triple string) error
	// Levels lists the instruction-set levels the kernels of triple are
	// cloned for and dispatch between at run time, baseline first.
	Levels(triple string) ([]string, error)
	// CheckLevels resolves a restriction of the levels (Options.CPULevels)
	// for triple: the names it holds as levels of triple, baseline first,
	// each once, "host" replaced by the building machine's best level. An
	// unknown name, an empty list or "host" for another architecture
	// than this machine's is an error naming the known levels.
	CheckLevels(triple string, levels []string) ([]string, error)
}

// TripleTarget returns the registered target that takes triples (nil when
// none does).
func TripleTarget() Target {
	for _, t := range All() {
		if _, ok := t.(Triples); ok {
			return t
		}
	}
	return nil
}

// CheckOptions validates opt against the targets a build runs: a triple
// or CPU levels need a target among them that takes them, and that target
// must know them.
func CheckOptions(ts []Target, opt Options) error {
	for _, t := range ts {
		if tr, ok := t.(Triples); ok {
			if err := tr.CheckTriple(opt.Triple); err != nil {
				return err
			}
			if opt.CPULevels != nil {
				_, err := tr.CheckLevels(opt.Triple, opt.CPULevels)
				return err
			}
			return nil
		}
	}
	if opt.Triple == "" && opt.CPULevels == nil {
		return nil
	}
	what := "triple " + opt.Triple
	if opt.Triple == "" {
		what = "CPU levels " + strings.Join(opt.CPULevels, ",")
	}
	var names, takers []string
	for _, t := range ts {
		names = append(names, t.Name())
	}
	for _, t := range All() {
		if _, ok := t.(Triples); ok {
			takers = append(takers, t.Name())
		}
	}
	return fmt.Errorf("%s applies to the %s target, which is not among the targets (%s)", what, strings.Join(takers, ", "), strings.Join(names, ", "))
}

// Workers is what of a call shape sizes a target's parallel work: the
// worker threads of a CPU, the multiprocessors of a GPU.
type Workers struct {
	// Flag names it as attnc's flags and messages do: "threads"
	// (registry.Shape.Threads) or "sms" (registry.Shape.SMs).
	Flag string
	// Max is the most a call shape may give; Why says why (a bound's
	// message).
	Max int
	Why string
	// Default is what attnc explain assumes when the flag is not given.
	Default int
}

// Get returns the field of s that w names.
func (w Workers) Get(s registry.Shape) int {
	if w.Flag == "sms" {
		return s.SMs
	}
	return s.Threads
}

// WorkerCount is implemented by a target whose calls take a worker count:
// Select, attnc explain and attnc.CheckShape read it.
type WorkerCount interface {
	Workers() Workers
}

// Entry is a public entry point of a built library: what the harness calls
// for a role, its parameters in call order, and whether a trailing stream
// argument follows (passed as 0, the default stream).
type Entry struct {
	Role   ir.Role
	Symbol string
	Params []*ir.Param
	Stream bool
	// ChecksTables says the entry validates every table it reads (CSR
	// indices, block table, page map) and returns a status; false: it
	// checks its scalars on the host and trusts the tables in device
	// memory.
	ChecksTables bool
}

// HostLibrary is a shared library the harness loads.
type HostLibrary struct {
	// Path is the library.
	Path string
	// Runner, when not "", is the triple whose emulator runs the library
	// in a runner process (cpurt.ToolchainFor(Runner).OpenRemote): a
	// foreign architecture. "" loads it in this process.
	Runner string
}

// Harness is implemented by a target whose scheduled modules can run on
// this machine — natively, under a CPU emulator, or on a GPU emulator
// compiled for the CPU: the conformance harness, attnc verify and attnc
// bench build and call them through it.
type Harness interface {
	// HarnessTools checks, before any work, that the tools the harness
	// needs for opt are installed; the error names what is missing.
	HarnessTools(opt Options) error
	// HostLibrary builds the files Emit wrote into dir for v's scheduled
	// module m into a shared library this machine loads (link: extra
	// arguments of the link step) and says how to load it.
	HostLibrary(v *ir.Variant, m *ir.Module, dir string, opt Options, link []string) (HostLibrary, error)
	// Entries lists m's public entry points as the library exports them.
	Entries(m *ir.Module) []Entry
}

// HostBuildIdentity is implemented by a Harness whose HostLibrary output
// depends on more than the files Emit wrote and the link arguments: the
// compiler it runs (path and --version output), its flags and the headers
// it adds. A cache of host libraries keyed by the emitted files (the
// conformance harness's) adds HostBuildIdentity to the key, so a library
// built by another compiler is never taken for this one's.
type HostBuildIdentity interface {
	HostBuildIdentity() string
}

// DeviceHarness is implemented by a target whose modules can also run on
// an accelerator of this machine (attnc verify --gpu, attnc bench --gpu).
type DeviceHarness interface {
	Harness
	// DeviceTools finds the device compiler; the error says what is
	// missing.
	DeviceTools() (compiler string, err error)
	// DeviceLibrary compiles the files Emit wrote into dir for v's
	// scheduled module m with compiler into a shared library that runs
	// them on the device.
	DeviceLibrary(v *ir.Variant, m *ir.Module, dir, compiler string) (string, error)
	// DeviceRuntime names the runtime library through which the harness
	// reaches the device's memory.
	DeviceRuntime() DeviceRuntime
}

// DeviceRuntime is an accelerator runtime library with the CUDA runtime's
// C API under a prefix (HIP's is the same under "hip"):
// <Prefix>GetDeviceCount(int *), <Prefix>Malloc(void **, size_t),
// <Prefix>Memcpy(dst, src, n, kind) with kinds 1 host to device, 2 device
// to host, 3 device to device, <Prefix>Free, <Prefix>DeviceSynchronize and
// <Prefix>GetErrorString, each but the last returning an int status.
type DeviceRuntime struct {
	Name   string   // for messages: "CUDA"
	Prefix string   // of the functions: "cuda"
	Libs   []string // library names tried in the loader's path, in order
	// Dirs are searched for Libs after the loader's path.
	Dirs []string
	// Install says how to get the library, for the error when none loads.
	Install string
}

// RuntimeSymbols names the functions a target's library defines besides the
// entry points (CPU: status messages, worker threads, level dispatch), for
// a module of prefix.
type RuntimeSymbols struct {
	Strerror   string // const char *strerror(int32_t code)
	SetThreads string // void set_num_threads(int32_t n)
	Level      string // const char *cpu_level(void): the level the entries run at
	// LevelEnv is the environment variable that, at a library's first
	// call, forces the level its entries run at.
	LevelEnv string
}

// HostRuntime is implemented by a target whose libraries carry a runtime
// the harness may use: messages, threads, levels and the stack a call
// needs.
type HostRuntime interface {
	RuntimeSymbols(prefix string) RuntimeSymbols
	// StackBytes is the most stack a call of kernel (an entry) of the
	// scheduled module m needs on the calling thread.
	StackBytes(m *ir.Module, kernel string) int64
}

// MachineCommand describes the attnc subcommand a MachineCode target adds
// (attnc sass for CUDA): its cobra texts and the --arch flag.
type MachineCommand struct {
	Name, Use, Short, Long, Example string
	// Archs are the architectures --arch accepts; DefaultArchs its default.
	Archs, DefaultArchs []string
}

// MachineTools are the found assembler and disassembler of a MachineCode
// target.
type MachineTools interface {
	// Describe says which tools, for the report's head line
	// ("ptxas=12.4").
	Describe() string
	// Check assembles the files Emit wrote for v (files) for each of archs
	// in the scratch directory dir, writes the table of the machine code
	// to w, and returns one line per machine-code target not met. kernels
	// are the manifest's kernels of v for this target.
	Check(w io.Writer, v *ir.Variant, files []Artifact, kernels []registry.KernelManifest, archs []string, dir string) (unmet []string, err error)
}

// MachineCode is implemented by a target whose kernels attnc can assemble
// and read back as machine code on this machine (no device needed).
type MachineCode interface {
	MachineCommand() MachineCommand
	// MachineTools finds the tools; the error says what is missing.
	MachineTools() (MachineTools, error)
}
