package cpu

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	llvmgen "github.com/attnc/attnc/codegen/llvm"
	lir "github.com/llir/llvm/ir"
	"github.com/llir/llvm/ir/constant"
	"github.com/llir/llvm/ir/enum"
	"github.com/llir/llvm/ir/types"
	"github.com/llir/llvm/ir/value"
)

// Level is a CPU level of an architecture: the instruction set a clone of
// the work kernels is scheduled and compiled for. One .ll carries a clone
// per level of its architecture; each clone's functions carry the level's
// "target-cpu" and "target-features" attributes, so a plain `opt -O3 &&
// llc -O3` compiles every clone for its own level whatever -mcpu says, and
// the entries pick the best level the CPU runs at the first call (CPUID and
// XGETBV on x86-64), or the one $ATTNC_CPU_LEVEL names.
type Level struct {
	Name   string // x86-64-v4: what ATTNC_CPU_LEVEL, the manifest and ir.Kernel.Level say
	Suffix string // appended to a work kernel's name for its clone
	// Lanes is the f32 lanes of one vector register, Regs the vector
	// registers: what the schedule's register blocking fits.
	Lanes, Regs int
	// FMA: fused multiply-add instructions (muladd fuses).
	FMA bool
	// NativeF16 widens IEEE half to f32 in one instruction (F16C, NEON):
	// the schedule may print f16 widening as fpext; without it fpext
	// would be a libgcc call, so the dtype table's conversion is used.
	NativeF16 bool
	// DotBF16: AVX512-BF16's vdpbf16ps (ir.DotBF16). Block-matmul runs
	// prefill's Q·Kᵀ whose operands are exact bf16 values on it, and the
	// level is cloned only for the work kernels that have such a product
	// (bf16Products): elsewhere its code would be the level below's, so
	// those kernels, and a module without any, run that level's clone
	// and its .ll does not name this level at all.
	DotBF16 bool
	// AMX: Intel AMX-TILE and AMX-BF16 (tdpbf16ps on tiles). Such a
	// level is also DotBF16 (cloned where vdpbf16ps is, and running it
	// where tiles do not fit); using the tiles needs the OS's permission
	// for the tile state, asked once (arch_prctl ARCH_REQ_XCOMP_PERM) when
	// detection or ATTNC_CPU_LEVEL picks the level; refused, detection
	// goes on as on a CPU without it (forced, the level below runs).
	AMX bool
	// Vendor, when set, is the CPUID vendor (leaf 0's EBX, EDX, ECX) on
	// whose CPUs the level pays: detection picks it only there (elsewhere
	// the level below runs), and no level above falls back to it (a
	// kernel without a clone at the level chosen runs the best level
	// below that has no Vendor, fallsTo). ATTNC_CPU_LEVEL still forces
	// it on any CPU that has its bits. The level below must need a subset
	// of its bits and have no Vendor.
	Vendor string
	// CPU and Features are LLVM's "target-cpu" and "target-features";
	// Attrs more function attributes (AVX-512: use 512-bit registers).
	CPU, Features string
	Attrs         [][2]string
	// needs are the CPUID bits the level requires (x86-64), xcr0 the
	// XCR0 bits the OS must have enabled (AVX and AVX-512 state).
	needs []cpuidBit
	xcr0  int64
}

// cpuidBit is one feature bit: CPUID leaf and subleaf, register (0 eax, 1
// ebx, 2 ecx, 3 edx) and bit.
type cpuidBit struct {
	leaf     int64
	reg, bit int
	name     string
	sub      int64
}

// x86-64 feature bits (Intel SDM vol. 2A, CPUID; AMD APM vol. 3).
var (
	bitsV2 = []cpuidBit{
		{1, 2, 0, "sse3", 0}, {1, 2, 9, "ssse3", 0}, {1, 2, 13, "cx16", 0}, {1, 2, 19, "sse4.1", 0}, {1, 2, 20, "sse4.2", 0},
		{1, 2, 23, "popcnt", 0}, {0x80000001, 2, 0, "lahf_lm", 0},
	}
	bitsV3 = append(append([]cpuidBit(nil), bitsV2...),
		cpuidBit{1, 2, 12, "fma", 0}, cpuidBit{1, 2, 22, "movbe", 0}, cpuidBit{1, 2, 27, "osxsave", 0}, cpuidBit{1, 2, 28, "avx", 0},
		cpuidBit{1, 2, 29, "f16c", 0}, cpuidBit{7, 1, 3, "bmi1", 0}, cpuidBit{7, 1, 5, "avx2", 0}, cpuidBit{7, 1, 8, "bmi2", 0},
		cpuidBit{0x80000001, 2, 5, "abm", 0})
	bitsV4 = append(append([]cpuidBit(nil), bitsV3...),
		cpuidBit{7, 1, 16, "avx512f", 0}, cpuidBit{7, 1, 17, "avx512dq", 0}, cpuidBit{7, 1, 28, "avx512cd", 0},
		cpuidBit{7, 1, 30, "avx512bw", 0}, cpuidBit{7, 1, 31, "avx512vl", 0})
)

const (
	featuresX86   = "+cx8,+fxsr,+mmx,+sse,+sse2,+x87"
	featuresX86V3 = "+avx,+avx2,+bmi,+bmi2,+cx16,+cx8,+f16c,+fma,+fxsr,+lzcnt,+mmx,+movbe,+popcnt,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+x87,+xsave"
	featuresX86V4 = featuresX86V3 + ",+avx512bw,+avx512cd,+avx512dq,+avx512f,+avx512vl"
	// featuresX86V4BF16 adds AVX512-BF16 (vcvtne2ps2bf16, vdpbf16ps).
	featuresX86V4BF16 = featuresX86V4 + ",+avx512bf16"
)

// bitsV4BF16 are x86-64-v4's bits and AVX512_BF16: CPUID leaf 7, subleaf
// 1, EAX bit 5 (Cooper Lake, Sapphire Rapids, Zen 4 and later).
var bitsV4BF16 = append(append([]cpuidBit(nil), bitsV4...), cpuidBit{leaf: 7, sub: 1, reg: 0, bit: 5, name: "avx512_bf16"})

// vendorAMD is AMD's CPUID vendor string: x86-64-v4-bf16's Vendor. On Zen 4
// and Zen 5 vdpbf16ps issues at the FMA's rate with twice its products
// (bf16 prefill 1.07x the FMA peak at that level on a Zen 4, 1.2x faster
// than x86-64-v4 on a Zen 5); on Intel's Golden Cove cores (Sapphire and
// Emerald Rapids) it reaches 0.53x the FMA's flop rate, and bf16 prefill
// ran 0.40 of the FMA peak there against about 0.5 at x86-64-v4
// (docs/benchmarks.md, machine C). Cooper Lake's is not measured.
const vendorAMD = "AuthenticAMD"

// bitsAMX are x86-64-v4-bf16's bits and AMX-BF16 and AMX-TILE: CPUID leaf
// 7, subleaf 0, EDX bits 22 and 24 (Sapphire Rapids and later).
var bitsAMX = append(append([]cpuidBit(nil), bitsV4BF16...),
	cpuidBit{leaf: 7, reg: 3, bit: 22, name: "amx_bf16"}, cpuidBit{leaf: 7, reg: 3, bit: 24, name: "amx_tile"})

const (
	// featuresX86AMX adds AMX-TILE and AMX-BF16 (the clone's tile code
	// is inline assembly; the features let llc accept it).
	featuresX86AMX = featuresX86V4BF16 + ",+amx-bf16,+amx-tile"
	// xcr0AMX: x86-64-v4's AVX-512 state and XTILECFG (bit 17) and
	// XTILEDATA (bit 18) enabled by the OS.
	xcr0AMX = 0xe6 | 1<<17 | 1<<18
	// archReqXcompPerm and xfeatureXtiledata are arch_prctl's request for
	// a state component's permission and the tile data's component
	// (Linux, arch/x86/include/uapi/asm/prctl.h); sysArchPrctl its
	// syscall number on x86-64.
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
	sysArchPrctl      = 158
)

// x86Levels are x86-64's levels, baseline first: SSE2 (any x86-64),
// x86-64-v3 (AVX2, FMA, F16C: Haswell, Zen), x86-64-v4 (AVX-512 F, BW,
// CD, DQ, VL: Skylake-SP, Zen 4) and x86-64-v4-bf16 (x86-64-v4 with
// AVX512-BF16: Cooper Lake, Sapphire Rapids, Zen 4), cloned only for the
// work kernels whose prefill Q·Kᵀ reads exact bf16 operands and detected
// only on AMD's CPUs (vendorAMD), and
// x86-64-amx (x86-64-v4-bf16 with AMX-TILE and AMX-BF16: Sapphire Rapids
// and later), cloned for the same kernels (first run on AMX hardware, an
// Emerald Rapids, on 2026-12-04: the conformance matrix and verify pass
// there, and bf16 prefill runs 1.6-2.5x the level below).
var x86Levels = []Level{
	{Name: "x86-64", Suffix: "_x86_64", Lanes: 4, Regs: 16, CPU: "x86-64", Features: featuresX86},
	{Name: "x86-64-v3", Suffix: "_x86_64_v3", Lanes: 8, Regs: 16, FMA: true, NativeF16: true, CPU: "x86-64-v3",
		Features: featuresX86V3, needs: bitsV3, xcr0: 0x6},
	{Name: "x86-64-v4", Suffix: "_x86_64_v4", Lanes: 16, Regs: 32, FMA: true, NativeF16: true, CPU: "x86-64-v4",
		Features: featuresX86V4, needs: bitsV4, xcr0: 0xe6,
		Attrs: [][2]string{{"prefer-vector-width", "512"}, {"min-legal-vector-width", "512"}}},
	{Name: "x86-64-v4-bf16", Suffix: "_x86_64_v4_bf16", Lanes: 16, Regs: 32, FMA: true, NativeF16: true, DotBF16: true, Vendor: vendorAMD, CPU: "x86-64-v4",
		Features: featuresX86V4BF16, needs: bitsV4BF16, xcr0: 0xe6,
		Attrs: [][2]string{{"prefer-vector-width", "512"}, {"min-legal-vector-width", "512"}}},
	{Name: "x86-64-amx", Suffix: "_x86_64_amx", Lanes: 16, Regs: 32, FMA: true, NativeF16: true, DotBF16: true, AMX: true,
		CPU: "x86-64-v4", Features: featuresX86AMX, needs: bitsAMX, xcr0: xcr0AMX,
		Attrs: [][2]string{{"prefer-vector-width", "512"}, {"min-legal-vector-width", "512"}}},
}

// aarch64Levels is aarch64's one level: NEON (Advanced SIMD), which every
// aarch64 Linux CPU has.
var aarch64Levels = []Level{
	{Name: "neon", Suffix: "_neon", Lanes: 4, Regs: 32, FMA: true, NativeF16: true, CPU: "generic", Features: "+fp-armv8,+neon"},
}

// LevelNames lists the levels of an architecture, baseline first.
func (t Arch) LevelNames() []string {
	var out []string
	for _, l := range t.Levels {
		out = append(out, l.Name)
	}
	return out
}

// LevelEnv is the environment variable that forces a CPU level.
const LevelEnv = "ATTNC_CPU_LEVEL"

// levelUnknown is the cached level before the first call decides it.
const levelUnknown = -2

// attrs are the function attributes of a clone of level l.
func (l Level) attrs() []llvmgen.Attr {
	attrs := []llvmgen.Attr{{Key: "target-cpu", Value: l.CPU}, {Key: "target-features", Value: l.Features}}
	for _, a := range l.Attrs {
		attrs = append(attrs, llvmgen.Attr{Key: a[0], Value: a[1]})
	}
	return attrs
}

// The CPU-level runtime:
//
//	@<prefix>.cpu_level_cache          internal global i32 (levelUnknown until decided)
//	i32 @<prefix>.cpu_level()          the level index the entries run (rt.cpu_level), -1: refused
//	i8* @<prefix>_cpu_level()          its name, or NULL when ATTNC_CPU_LEVEL is refused
//	i32 @<prefix>.detect_level()       the best level index this CPU runs
func (e *runtimeEmitter) declareLevelRuntime() {
	p := e.prefix
	for _, n := range []string{p + ".cpu_level_cache", p + ".cpu_level", p + "_cpu_level", p + ".detect_level"} {
		e.reserve(n)
	}
	if e.hasAMX() {
		e.reserve(p + ".amx_permit")
		e.amxPermit = lir.NewFunc(p+".amx_permit", types.I1)
		e.amxPermit.Parent = e.mod
		e.amxPermit.Linkage = enum.LinkageInternal
		e.amxPermit.FuncAttrs = append(e.amxPermit.FuncAttrs, enum.FuncAttrNoUnwind)
		e.reserve(p + ".amx_mm32")
		for _, l := range e.arch.Levels {
			if l.AMX {
				e.amxMM = newAMXBlocks(p+".amx_mm32", l)
			}
		}
		e.amxMM.Parent = e.mod
	}
	if e.daz {
		if !strings.HasPrefix(e.arch.Triple, "x86_64") {
			e.fail("rt.fp_daz: x86-64 only, not %s", e.arch.Triple)
		}
		e.reserve(p + ".fp_daz")
		e.fpDAZ = lir.NewFunc(p+".fp_daz", types.I32)
		e.fpDAZ.Parent = e.mod
		e.fpDAZ.Linkage = enum.LinkageInternal
		e.fpDAZ.FuncAttrs = append(e.fpDAZ.FuncAttrs, enum.FuncAttrNoUnwind)
	}
	e.levelCache = lir.NewGlobalDef(p+".cpu_level_cache", constant.NewInt(types.I32, levelUnknown))
	e.levelCache.Linkage = enum.LinkageInternal
	e.levelCache.Align = 4
	e.mod.Globals = append(e.mod.Globals, e.levelCache)
	e.cpuLevel = lir.NewFunc(p+".cpu_level", types.I32)
	e.cpuLevel.Parent = e.mod
	e.cpuLevel.Linkage = enum.LinkageInternal
	e.cpuLevel.FuncAttrs = append(e.cpuLevel.FuncAttrs, enum.FuncAttrNoUnwind)
	e.levelName = lir.NewFunc(p+"_cpu_level", i8p)
	e.levelName.Parent = e.mod
	e.levelName.FuncAttrs = append(e.levelName.FuncAttrs, enum.FuncAttrNoUnwind)
	e.detectLevel = lir.NewFunc(p+".detect_level", types.I32)
	e.detectLevel.Parent = e.mod
	e.detectLevel.Linkage = enum.LinkageInternal
	e.detectLevel.FuncAttrs = append(e.detectLevel.FuncAttrs, enum.FuncAttrNoUnwind)
}

func (e *runtimeEmitter) defineLevelRuntime() {
	if e.amxPermit != nil {
		e.defineAMXPermit()
	}
	e.defineDetectLevel()
	e.defineCPULevel()
	e.defineLevelName()
}

// defineCPULevel: the cached value when decided; else the detected level,
// or, when ATTNC_CPU_LEVEL is set and not empty, the level it names if the
// CPU runs it and -1 otherwise (unknown name or a level above the detected
// one). An AMX level, detected or named, runs only once the OS grants the
// tile state (amx_permit); refused, the level below it runs. Threads
// racing on the first call compute the same value.
func (e *runtimeEmitter) defineCPULevel() {
	f := e.cpuLevel
	entry := f.NewBlock("entry")
	decide := f.NewBlock("decide")
	cached := named(entry.NewLoad(types.I32, e.levelCache), "cached")
	cached.Atomic, cached.Ordering, cached.Align = true, enum.AtomicOrderingMonotonic, 4
	known := named(entry.NewICmp(enum.IPredNE, cached, llI32(levelUnknown)), "known")
	done := f.NewBlock("done")
	entry.NewCondBr(known, done, decide)
	done.NewRet(cached)

	best := named(decide.NewCall(e.detectLevel), "best")
	// auto: the best level; an AMX level runs only once the OS grants
	// the tile state, refused the level below.
	var auto value.Value = best
	if i := e.amxLevel(); i >= 0 {
		ask := f.NewBlock("auto.permit")
		join := f.NewBlock("auto.decided")
		isAMX := named(decide.NewICmp(enum.IPredEQ, best, llI32(int64(i))), "auto.amx")
		decide.NewCondBr(isAMX, ask, join)
		ok := named(ask.NewCall(e.amxPermit), "auto.granted")
		granted := named(ask.NewSelect(ok, llI32(int64(i)), llI32(int64(i-1))), "auto.pick")
		ask.NewBr(join)
		phi := named(lir.NewPhi(lir.NewIncoming(best, decide), lir.NewIncoming(granted, ask)), "auto")
		join.Insts = append(join.Insts, phi)
		auto, decide = phi, join
	}
	// A level with a Vendor (x86-64-v4-bf16) is detected on that
	// vendor's CPUs only; elsewhere the level below runs (after the AMX
	// step: a refused tile state lands here too).
	for i := len(e.arch.Levels) - 1; i >= 0; i-- {
		below, ok := e.vendorBelow[i]
		if !ok {
			continue
		}
		is := named(decide.NewICmp(enum.IPredEQ, auto, llI32(int64(i))), fmt.Sprintf("auto.is%d", i))
		other := named(decide.NewXor(e.vendorIs(decide, e.arch.Levels[i].Vendor), constant.True), fmt.Sprintf("auto.other%d", i))
		demote := named(decide.NewAnd(is, other), fmt.Sprintf("auto.demote%d", i))
		auto = named(decide.NewSelect(demote, llI32(int64(below)), auto), fmt.Sprintf("auto.v%d", i))
	}
	env := named(decide.NewCall(e.decl("getenv", i8p, i8p), e.message(LevelEnv)), "env")
	isNull := named(decide.NewICmp(enum.IPredEQ, env, constant.NewNull(i8p)), "unset")
	check := f.NewBlock("env.check")
	store := f.NewBlock("store")
	var incs []*lir.Incoming
	incs = append(incs, lir.NewIncoming(auto, decide))
	decide.NewCondBr(isNull, store, check)
	first := named(check.NewLoad(types.I8, env), "first")
	empty := named(check.NewICmp(enum.IPredEQ, first, constant.NewInt(types.I8, 0)), "empty")
	incs = append(incs, lir.NewIncoming(auto, check))
	cur := f.NewBlock("env.level0")
	check.NewCondBr(empty, store, cur)
	strcmp := e.decl("strcmp", types.I32, i8p, i8p)
	// match: a variable equal to name picks level index pick if the CPU
	// runs it, else -1; the i-th comparison. amx: pick needs the tile
	// state's permission too, and refused runs pick-1.
	match := func(i int, name string, pick int64, amx bool) {
		c := named(cur.NewCall(strcmp, env, e.message(name)), fmt.Sprintf("cmp%d", i))
		is := named(cur.NewICmp(enum.IPredEQ, c, llI32(0)), fmt.Sprintf("is%d", i))
		runs := named(cur.NewICmp(enum.IPredSLE, llI32(pick), best), fmt.Sprintf("runs%d", i))
		var v value.Value
		if !amx {
			v = named(cur.NewSelect(runs, llI32(pick), llI32(-1)), fmt.Sprintf("pick%d", i))
		}
		next := f.NewBlock(fmt.Sprintf("env.level%d", i+1))
		hit := f.NewBlock(fmt.Sprintf("env.hit%d", i))
		cur.NewCondBr(is, hit, next)
		if !amx {
			hit.NewBr(store)
			incs = append(incs, lir.NewIncoming(v, hit))
		} else {
			perm := f.NewBlock(fmt.Sprintf("env.permit%d", i))
			hit.NewCondBr(runs, perm, store)
			incs = append(incs, lir.NewIncoming(llI32(-1), hit))
			ok := named(perm.NewCall(e.amxPermit), fmt.Sprintf("granted%d", i))
			v = named(perm.NewSelect(ok, llI32(pick), llI32(pick-1)), fmt.Sprintf("pick%d", i))
			perm.NewBr(store)
			incs = append(incs, lir.NewIncoming(v, perm))
		}
		cur = next
	}
	for i, l := range e.arch.Levels {
		match(i, l.Name, int64(i), l.AMX)
	}
	// A level of the architecture the module lacks (a DotBF16 level no
	// kernel of it is cloned at) runs the best level below it, if the CPU
	// runs that: one ATTNC_CPU_LEVEL serves every library of a process.
	for j, a := range e.absent {
		match(len(e.arch.Levels)+j, a.name, int64(a.below), false)
	}
	cur.NewBr(store)
	incs = append(incs, lir.NewIncoming(llI32(-1), cur))
	lv := named(lir.NewPhi(incs...), "level")
	lv.Type()
	store.Insts = append(store.Insts, lv)
	var level value.Value = lv
	if e.floor > 0 {
		// A build restricted to some levels: a level below the lowest
		// one every kernel has a clone at is refused, so that
		// <prefix>_cpu_level() is NULL exactly when the entries return
		// CPU_LEVEL.
		below := named(store.NewICmp(enum.IPredSLT, lv, llI32(int64(e.floor))), "below.floor")
		level = named(store.NewSelect(below, llI32(-1), lv), "level.built")
	}
	st := store.NewStore(level, e.levelCache)
	st.Atomic, st.Ordering, st.Align = true, enum.AtomicOrderingMonotonic, 4
	store.NewRet(level)
}

// vendorIs is whether CPUID leaf 0's vendor string (EBX, EDX, ECX) is
// vendor (12 bytes), computed in b.
func (e *runtimeEmitter) vendorIs(b *lir.Block, vendor string) value.Value {
	if len(vendor) != 12 {
		e.fail("CPU vendor %q is not 12 bytes", vendor)
		return constant.False
	}
	cpuid := cpuidAsm()
	r := named(b.NewCall(cpuid, llI32(0), llI32(0)), "vendor")
	var all value.Value = constant.True
	for k, reg := range []uint64{1, 3, 2} { // EBX, EDX, ECX
		word := binary.LittleEndian.Uint32([]byte(vendor[4*k : 4*k+4]))
		got := named(b.NewExtractValue(r, reg), fmt.Sprintf("vendor.%d", k))
		all = b.NewAnd(all, named(b.NewICmp(enum.IPredEQ, got, llI32(int64(int32(word)))), fmt.Sprintf("vendor.is%d", k)))
	}
	return all
}

// cpuidAsm is CPUID as inline assembly: {eax, ebx, ecx, edx} of (leaf,
// subleaf).
func cpuidAsm() *lir.InlineAsm {
	regs := types.NewStruct(types.I32, types.I32, types.I32, types.I32)
	a := lir.NewInlineAsm(types.NewPointer(types.NewFunc(regs, types.I32, types.I32)), "cpuid",
		"={ax},={bx},={cx},={dx},{ax},{cx},~{dirflag},~{fpsr},~{flags}")
	a.SideEffect = true
	return a
}

// hasAMX reports whether the module has an AMX level.
func (e *runtimeEmitter) hasAMX() bool { return e.amxLevel() >= 0 }

// amxLevel is the index of the module's AMX level, -1 without one.
func (e *runtimeEmitter) amxLevel() int {
	for i, l := range e.arch.Levels {
		if l.AMX {
			return i
		}
	}
	return -1
}

// defineAMXPermit: i1 @<prefix>.amx_permit() asks Linux for this process's
// permission to use the AMX tile data (arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA), a raw syscall: the .ll needs no libc symbol for
// it) and says whether it was granted (0 returned; granted before also
// returns 0). Called once, when detection or ATTNC_CPU_LEVEL picks the
// level on a CPU with AMX-TILE, AMX-BF16 and XCR0's tile bits.
func (e *runtimeEmitter) defineAMXPermit() {
	f := e.amxPermit
	b := f.NewBlock("entry")
	sc := lir.NewInlineAsm(types.NewPointer(types.NewFunc(types.I64, types.I64, types.I64, types.I64)), "syscall",
		"={ax},{ax},{di},{si},~{rcx},~{r11},~{memory},~{dirflag},~{fpsr},~{flags}")
	sc.SideEffect = true
	r := named(b.NewCall(sc, constant.NewInt(types.I64, sysArchPrctl), constant.NewInt(types.I64, archReqXcompPerm),
		constant.NewInt(types.I64, xfeatureXtiledata)), "r")
	ok := named(b.NewICmp(enum.IPredEQ, r, constant.NewInt(types.I64, 0)), "granted")
	b.NewRet(ok)
}

// defineLevelName: the chosen level's name, or NULL when it is refused.
func (e *runtimeEmitter) defineLevelName() {
	f := e.levelName
	entry := f.NewBlock("entry")
	lv := named(entry.NewCall(e.cpuLevel), "level")
	refused := f.NewBlock("refused")
	refused.NewRet(constant.NewNull(i8p))
	var cases []*lir.Case
	for i, l := range e.arch.Levels {
		b := f.NewBlock(fmt.Sprintf("level%d", i))
		b.NewRet(e.message(l.Name))
		cases = append(cases, lir.NewCase(llI32(int64(i)), b))
	}
	entry.NewSwitch(lv, refused, cases...)
}

// defineDetectLevel: the highest level whose CPUID bits are set and whose
// register state the OS enabled (XGETBV, read only when OSXSAVE says it
// may be). Levels without requirements (the baseline, NEON) always run;
// a module without one (a build restricted to higher levels) returns -1
// on a CPU that runs none of its levels. hostLevel is the same decision
// in Go, for attnc build --cpu-levels host.
func (e *runtimeEmitter) defineDetectLevel() {
	f := e.detectLevel
	b := f.NewBlock("entry")
	// top: the highest level that needs nothing, -1 when the module has
	// none (a build restricted to levels above the baseline).
	top := -1
	for i, l := range e.arch.Levels {
		if len(l.needs) == 0 {
			top = i
		}
	}
	if top == len(e.arch.Levels)-1 {
		b.NewRet(llI32(int64(top)))
		return
	}
	cpuid := cpuidAsm()
	call := func(b *lir.Block, leaf, sub value.Value, name string) [4]value.Value {
		r := named(b.NewCall(cpuid, leaf, sub), name)
		var out [4]value.Value
		for k := range out {
			out[k] = named(b.NewExtractValue(r, uint64(k)), fmt.Sprintf("%s.%c", name, "abcd"[k]))
		}
		return out
	}
	// Leaves 0 and 0x80000000 give the highest basic and extended leaves;
	// a leaf above them reads as zeros.
	// A subleaf above 0 (leaf 7's) is read when a level needs it and
	// counts only when leaf 7 subleaf 0's EAX (the highest subleaf)
	// reaches it.
	max0 := call(b, llI32(0), llI32(0), "l0")[0]
	maxE := call(b, llI32(0x80000000), llI32(0), "le")[0]
	leafRegs := map[[2]int64][4]value.Value{}
	leaves := [][2]int64{{1, 0}, {7, 0}, {0x80000001, 0}}
	for _, l := range e.arch.Levels {
		for _, nb := range l.needs {
			if nb.sub != 0 && !slices.Contains(leaves, [2]int64{nb.leaf, nb.sub}) {
				leaves = append(leaves, [2]int64{nb.leaf, nb.sub})
			}
		}
	}
	for _, ls := range leaves {
		leaf, sub := ls[0], ls[1]
		name := fmt.Sprintf("%x", leaf)
		if sub != 0 {
			name = fmt.Sprintf("%x.%d", leaf, sub)
		}
		limit := max0
		if leaf >= 0x80000000 {
			limit = maxE
		}
		var has value.Value = named(b.NewICmp(enum.IPredUGE, limit, llI32(leaf)), "has."+name)
		if sub != 0 {
			maxSub, ok := leafRegs[[2]int64{leaf, 0}]
			if !ok {
				e.fail("CPUID leaf %x subleaf %d: leaf %x subleaf 0 is not read", leaf, sub, leaf)
			}
			subOK := named(b.NewICmp(enum.IPredUGE, maxSub[0], llI32(sub)), "hassub."+name)
			has = named(b.NewAnd(has, subOK), "has.both."+name)
		}
		safe := named(b.NewSelect(has, llI32(leaf), llI32(0)), "leaf."+name)
		r := call(b, safe, llI32(sub), "l"+name)
		var masked [4]value.Value
		for k := range r {
			masked[k] = named(b.NewSelect(has, r[k], llI32(0)), fmt.Sprintf("l%s.%c.ok", name, "abcd"[k]))
		}
		leafRegs[ls] = masked
	}
	// XCR0, read with XGETBV only when OSXSAVE (CPUID.1:ECX bit 27) is set.
	osx := named(b.NewAnd(leafRegs[[2]int64{1, 0}][2], llI32(1<<27)), "osxsave")
	hasOSX := named(b.NewICmp(enum.IPredNE, osx, llI32(0)), "has.osxsave")
	xget := f.NewBlock("xgetbv")
	decide := f.NewBlock("decide")
	b.NewCondBr(hasOSX, xget, decide)
	xgetbv := lir.NewInlineAsm(types.NewPointer(types.NewFunc(types.NewStruct(types.I32, types.I32), types.I32)), "xgetbv",
		"={ax},={dx},{cx},~{dirflag},~{fpsr},~{flags}")
	xgetbv.SideEffect = true
	xr := named(xget.NewCall(xgetbv, llI32(0)), "xcr0.r")
	xlo := named(xget.NewExtractValue(xr, 0), "xcr0.lo")
	xget.NewBr(decide)
	xcr0 := named(lir.NewPhi(lir.NewIncoming(llI32(0), b), lir.NewIncoming(xlo, xget)), "xcr0")
	xcr0.Type()
	decide.Insts = append(decide.Insts, xcr0)
	var level value.Value = llI32(int64(top))
	for i := top + 1; i < len(e.arch.Levels); i++ {
		l := e.arch.Levels[i]
		var ok value.Value = constant.True
		for _, nb := range l.needs {
			bit := named(decide.NewAnd(leafRegs[[2]int64{nb.leaf, nb.sub}][nb.reg], llI32(int64(int32(uint32(1)<<nb.bit)))), fmt.Sprintf("v%d.bit.%s", i, nb.name))
			set := named(decide.NewICmp(enum.IPredNE, bit, llI32(0)), fmt.Sprintf("v%d.%s", i, nb.name))
			ok = decide.NewAnd(ok, set)
		}
		if l.xcr0 != 0 {
			st := named(decide.NewAnd(xcr0, llI32(l.xcr0)), fmt.Sprintf("state%d", i))
			en := named(decide.NewICmp(enum.IPredEQ, st, llI32(l.xcr0)), fmt.Sprintf("enabled%d", i))
			ok = decide.NewAnd(ok, en)
		}
		level = named(decide.NewSelect(ok, llI32(int64(i)), level), fmt.Sprintf("upto%d", i))
	}
	decide.NewRet(level)
}
