package cpu

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
	"github.com/attnc/attnc/reference"
)

// codeTypes are the 8-bit KV code dtypes, in the order widenModule's
// kernels take and write them.
var codeTypes = []ir.DType{ir.DTE4M3, ir.DTE5M2, ir.DTI8}

// widenModule is three kernels per CPU level of tg widening a buffer of
// codes as each 8-bit dtype, after native-widen and legalize-dtype:
// w<suffix>, o_<dtype>[i] = f32(x[i]) in a vector loop, as K/V staging
// does; wv<suffix>, the same as explicit vectors of the level's f32 lanes
// (f32xL(x[i]:<dtype>xL), as block-matmul's products widen a tile staged
// as stored) with a scalar tail; wf<suffix>, wv's loops in the Then branch
// of an if tagged finite (finite-codes: no NaN codes there), which
// native-widen widens with FiniteHalfWiden.
func widenModule(t *testing.T, tg Arch) *ir.Module {
	var src strings.Builder
	src.WriteString("module w prefix w\n")
	for _, l := range tg.Levels {
		var params, body, vbody []string
		for _, dt := range codeTypes {
			params = append(params, fmt.Sprintf("x_%s: %s* [n]", dt, dt))
			body = append(body, fmt.Sprintf("    store o_%s[i] = f32(x_%s[i])", dt, dt))
			vbody = append(vbody, fmt.Sprintf("    store o_%s[(i * %d)] = f32x%d(x_%s[(i * %d)]:%sx%d)", dt, l.Lanes, l.Lanes, dt, l.Lanes, dt, l.Lanes))
		}
		for _, dt := range codeTypes {
			params = append(params, fmt.Sprintf("o_%s: f32* [n] out", dt))
		}
		fmt.Fprintf(&src, "\nkernel w%s role decode level %q (%s, n: i32) {\n  for i in 0 .. n vector {\n%s\n  }\n  return 0\n}\n",
			l.Suffix, l.Name, strings.Join(params, ", "), strings.Join(body, "\n"))
		fmt.Fprintf(&src, "\nkernel wv%s role decode level %q (%s, n: i32) {\n  for i in 0 .. (n / %d) serial {\n%s\n  }\n  for i in ((n / %d) * %d) .. n serial {\n%s\n  }\n  return 0\n}\n",
			l.Suffix, l.Name, strings.Join(params, ", "), l.Lanes, strings.Join(vbody, "\n"), l.Lanes, l.Lanes, strings.Join(body, "\n"))
		fmt.Fprintf(&src, "\nkernel wf%s role decode level %q (%s, n: i32) {\n  if (n >= 0) @finite {\n  for i in 0 .. (n / %d) serial {\n%s\n  }\n  for i in ((n / %d) * %d) .. n serial {\n%s\n  }\n  }\n  return 0\n}\n",
			l.Suffix, l.Name, strings.Join(params, ", "), l.Lanes, strings.Join(vbody, "\n"), l.Lanes, l.Lanes, strings.Join(body, "\n"))
	}
	m, err := ir.Parse(src.String())
	if err != nil {
		t.Fatal(err)
	}
	mc := &Machine{Arch: tg}
	for _, p := range []func(*ir.Module) (*ir.Module, error){mc.NativeWiden, passes.LegalizeDType} {
		if m, err = p(m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// checkCode checks got, the widened value of code c of dt, against the
// OFP8 (or two's complement) definition and the dtype table's integer
// Widen: the same f32 bits, a NaN of the same sign where the code is NaN.
func checkCode(dt ir.DType, c uint8, got float32) error {
	def := reference.CodeValue(dt, c)
	w, err := ir.EvalExpr(dt.Info().Widen(ir.IntT(ir.U8, int64(c))), nil)
	if err != nil {
		return err
	}
	table := w.(float32)
	if math.IsNaN(def) {
		if !math.IsNaN(float64(got)) || !math.IsNaN(float64(table)) || math.Signbit(float64(got)) != math.Signbit(float64(table)) {
			return fmt.Errorf("%s code %#02x: got %v (%#08x), want NaN like the table's %#08x", dt, c, got, math.Float32bits(got), math.Float32bits(table))
		}
		return nil
	}
	want := float32(def)
	if float64(want) != def || math.Float32bits(table) != math.Float32bits(want) {
		return fmt.Errorf("%s code %#02x: the definition's %v and the table's %v disagree", dt, c, def, table)
	}
	if math.Float32bits(got) != math.Float32bits(want) {
		return fmt.Errorf("%s code %#02x: got %v (%#08x), want %v (%#08x)", dt, c, got, math.Float32bits(got), want, math.Float32bits(want))
	}
	return nil
}

// finiteSkips reports whether kernel sym's widening of code c of dt is
// unspecified: a NaN code (the dtype table's NaNMask) in a wf kernel,
// whose if promises no NaN codes.
func finiteSkips(sym string, dt ir.DType, c uint8) bool {
	m := dt.Info().NaNMask
	return strings.HasPrefix(sym, "wf") && m != 0 && int64(c)&m == m
}

// codeRunner calls a compiled kernel on code and f32 buffers: in this
// process, or in a runner under the target's emulator.
type codeRunner interface {
	alloc(n int) int64
	write(addr int64, b []byte)
	read(addr int64, n int) []byte
	call(sym string, args ...int64) (int32, error)
	level() string // the best level the CPU runs
}

type localRunner struct {
	t    *testing.T
	lib  *cpurt.Lib
	bufs map[int64]*cpurt.Buffer
	env  uint32 // MXCSR for calls (cpurt.Lib.CallFPEnv); 0: the thread's own
}

func (r *localRunner) alloc(n int) int64 {
	b := cpurt.NewBuffer(n)
	r.t.Cleanup(b.Free)
	r.bufs[b.Ptr()] = b
	return b.Ptr()
}
func (r *localRunner) write(addr int64, b []byte) { copy(r.bufs[addr].U8(), b) }
func (r *localRunner) read(addr int64, n int) []byte {
	return append([]byte(nil), r.bufs[addr].U8()[:n]...)
}
func (r *localRunner) call(sym string, args ...int64) (int32, error) {
	if r.env != 0 {
		return r.lib.CallFPEnv(sym, r.env, args...)
	}
	return r.lib.Call(sym, args...)
}
func (r *localRunner) level() string { return r.lib.CallStr("w_cpu_level", 0) }

type remoteRunner struct {
	t *testing.T
	r *cpurt.Remote
}

func (r *remoteRunner) alloc(n int) int64 {
	a, err := r.r.Alloc(n)
	if err != nil {
		r.t.Fatal(err)
	}
	return a
}
func (r *remoteRunner) write(addr int64, b []byte) {
	if err := r.r.Write(addr, b); err != nil {
		r.t.Fatal(err)
	}
}
func (r *remoteRunner) read(addr int64, n int) []byte {
	b := make([]byte, n)
	if err := r.r.Read(b, addr); err != nil {
		r.t.Fatal(err)
	}
	return b
}
func (r *remoteRunner) call(sym string, args ...int64) (int32, error) { return r.r.Call(sym, args...) }
func (r *remoteRunner) level() string                                 { return r.r.CallStr("w_cpu_level", 0) }

// TestCodeWidenExhaustive compiles the widening of every 8-bit code dtype
// for each CPU level of each triple this machine builds and runs (the
// host's, aarch64 under qemu): native-widen's half conversion on the
// levels with native f16 (x86-64-v3, -v4, NEON), legalize-dtype's integer
// Widen on the others, each as the loop vectorizer's scalar loop and as
// explicit vectors (widenModule's two kernels). Every one of the 256 codes
// of each dtype is widened at every start offset of a 256-code buffer (so
// each code passes through every vector lane and the scalar tail) by both
// kernels and must give the f32
// bits of its OFP8 / two's complement value (NaN of the same sign for NaN
// codes), on an x86-64 host also with MXCSR's DAZ and FTZ set. The
// interpreter runs every level's kernel on the 256 codes too.
func TestCodeWidenExhaustive(t *testing.T) {
	t.Parallel()
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	for _, triple := range cpurt.Triples() {
		t.Run(triple, func(t *testing.T) {
			tg, err := LookupArch(triple)
			if err != nil {
				t.Fatal(err)
			}
			m := widenModule(t, tg)
			if tg.Levels[len(tg.Levels)-1].NativeF16 {
				ll, err := emitLL(m, tg)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(ll, "fpext") {
					t.Fatal("no native half conversion in the widest level's kernel")
				}
			}
			// The finite kernels drop e4m3's NaN selects where the level
			// converts half natively, and only there.
			text := map[string]string{}
			for _, k := range m.Kernels {
				text[k.Name] = k.String()
			}
			for _, l := range tg.Levels {
				wv, wf := strings.Count(text["wv"+l.Suffix], "select"), strings.Count(text["wf"+l.Suffix], "select")
				if l.NativeF16 != (wf < wv) {
					t.Fatalf("%s (native f16 %v): %d selects in the finite kernel, %d in wv", l.Name, l.NativeF16, wf, wv)
				}
				// At the AVX-512 levels the finite kernel widens e4m3
				// through f32 bits (bitsWiden: the sign-extended code
				// shifted, bits 30-27 cleared), elsewhere through the half
				// bits.
				bits := strings.Contains(text["wf"+l.Suffix], strconv.Itoa(-0x78000001))
				if want := bitsWiden(ir.E4M3, l); bits != want {
					t.Fatalf("%s: e4m3 widened through f32 bits in the finite kernel: %v, want %v", l.Name, bits, want)
				}
			}
			for _, k := range m.Kernels {
				args := map[string]any{"n": int32(256)}
				for _, dt := range codeTypes {
					args["x_"+dt.String()] = append([]byte(nil), codes...)
					args["o_"+dt.String()] = make([]float32, 256)
				}
				if st, err := ir.Run(m, k.Name, args); err != nil || st != 0 {
					t.Fatalf("interpreter %s: status %d, %v", k.Name, st, err)
				}
				for _, dt := range codeTypes {
					for c, y := range args["o_"+dt.String()].([]float32) {
						if finiteSkips(k.Name, dt, uint8(c)) {
							continue
						}
						if err := checkCode(dt, uint8(c), y); err != nil {
							t.Fatalf("interpreter %s: %v", k.Name, err)
						}
					}
				}
			}

			tc, err := cpurt.ToolchainFor(triple)
			needtool.Check(t, err)
			ll, err := emitLL(m, tg)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "w.ll"), []byte(ll), 0o644); err != nil {
				t.Fatal(err)
			}
			so := filepath.Join(dir, "w.so")
			if err := tc.BuildShared(filepath.Join(dir, "w.ll"), so); err != nil {
				t.Fatal(err)
			}
			var run codeRunner
			if tc.Foreign() {
				rem, err := tc.OpenRemote(so)
				if err != nil {
					t.Fatal(err)
				}
				defer rem.Close()
				run = &remoteRunner{t, rem}
			} else {
				lib, err := cpurt.Open(so)
				if err != nil {
					t.Fatal(err)
				}
				defer lib.Close()
				run = &localRunner{t: t, lib: lib, bufs: map[int64]*cpurt.Buffer{}}
			}
			in := run.alloc(256)
			run.write(in, codes)
			outs := make([]int64, len(codeTypes))
			for i := range outs {
				outs[i] = run.alloc(4 * 256)
			}
			// envs: each kernel runs in the default floating-point
			// environment and, on an x86-64 host, with MXCSR's DAZ and FTZ
			// set (cpurt.MXCSRFlushDenormals), where every widening must
			// still be exact: none passes through an f32 subnormal (the
			// integer Widen rebiases by integer adds) except
			// FiniteBitsWiden's, which finite-codes runs only where
			// rt.fp_daz says DAZ is off (a wf kernel's dtypes that
			// bitsWiden widens so are not checked under DAZ: its if asks
			// nothing).
			envs := []uint32{0}
			if _, ok := run.(*localRunner); ok && runtime.GOARCH == "amd64" {
				envs = append(envs, cpurt.MXCSRFlushDenormals)
			}
			best := run.level()
			for _, l := range tg.Levels {
				for _, env := range envs {
					for _, sym := range []string{"w" + l.Suffix, "wv" + l.Suffix, "wf" + l.Suffix} {
						if local, ok := run.(*localRunner); ok {
							local.env = env
						}
						widened := 0
						for off := range 256 {
							args := []int64{}
							for range codeTypes {
								args = append(args, in+int64(off)) // read only: one buffer serves every dtype
							}
							for _, o := range outs {
								run.write(o, make([]byte, 4*256))
								args = append(args, o+4*int64(off))
							}
							args = append(args, int64(256-off))
							if st, err := run.call(sym, args...); err != nil || st != 0 {
								t.Fatalf("%s: status %d, %v", sym, st, err)
							}
							for i, dt := range codeTypes {
								b := run.read(outs[i], 4*256)
								for j := off; j < 256; j++ {
									y := math.Float32frombits(uint32(b[4*j]) | uint32(b[4*j+1])<<8 | uint32(b[4*j+2])<<16 | uint32(b[4*j+3])<<24)
									if finiteSkips(sym, dt, uint8(j)) || env != 0 && strings.HasPrefix(sym, "wf") && bitsWiden(dt.Type(), l) {
										continue
									}
									if err := checkCode(dt, uint8(j), y); err != nil {
										t.Fatalf("%s %s (native f16 %v, MXCSR %#x), offset %d: %v", sym, l.Name, l.NativeF16, env, off, err)
									}
									widened++
								}
							}
						}
						t.Logf("%s %s (native f16 %v, MXCSR %#x): %d codes widened exactly (256 codes x %d dtypes at 256 offsets)", sym, l.Name, l.NativeF16, env, widened, len(codeTypes))
					}
				}
				if l.Name == best {
					break // the levels above would not run here
				}
			}
		})
	}
}

// BenchmarkCodeWiden times the widening loop of each 8-bit code dtype
// (32 KiB of codes, L1-resident, into f32) at each CPU level this CPU
// runs, with legalize-dtype's integer Widen ("int") and with native-widen
// first ("native": the half conversion where the level has one). `go test
// ./targets/cpu -run XXX -bench CodeWiden`.
func BenchmarkCodeWiden(b *testing.B) {
	tg, err := LookupArch(cpurt.HostTriple())
	if err != nil {
		b.Skip(err)
	}
	tc, err := cpurt.ToolchainFor("")
	needtool.Check(b, err)
	var all []*ir.Kernel
	var m *ir.Module
	for _, native := range []bool{false, true} {
		var src strings.Builder
		src.WriteString("module w prefix w\n")
		for _, l := range tg.Levels {
			for _, dt := range codeTypes {
				fmt.Fprintf(&src, "\nkernel w_%s_%t%s role decode level %q (x: %s* [n], o: f32* [n] out, n: i32) {\n  for i in 0 .. n vector {\n    store o[i] = f32(x[i])\n  }\n  return 0\n}\n",
					dt, native, l.Suffix, l.Name, dt)
			}
		}
		if m, err = ir.Parse(src.String()); err != nil {
			b.Fatal(err)
		}
		ps := []func(*ir.Module) (*ir.Module, error){passes.LegalizeDType}
		if native {
			ps = append([]func(*ir.Module) (*ir.Module, error){(&Machine{Arch: tg}).NativeWiden}, ps...)
		}
		for _, p := range ps {
			if m, err = p(m); err != nil {
				b.Fatal(err)
			}
		}
		all = append(all, m.Kernels...)
	}
	m.Kernels = all
	ll, err := emitLL(m, tg)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.ll"), []byte(ll), 0o644); err != nil {
		b.Fatal(err)
	}
	so := filepath.Join(dir, "w.so")
	if err := tc.BuildShared(filepath.Join(dir, "w.ll"), so); err != nil {
		b.Fatal(err)
	}
	lib, err := cpurt.Open(so)
	if err != nil {
		b.Fatal(err)
	}
	defer lib.Close()
	const n = 32 << 10
	codes := make([]byte, n)
	for i := range codes {
		codes[i] = byte(i * 167)
	}
	in := cpurt.U8Buffer(codes)
	defer in.Free()
	out := cpurt.NewBuffer(4 * n)
	defer out.Free()
	best := lib.CallStr("w_cpu_level", 0)
	for _, l := range tg.Levels {
		for _, dt := range codeTypes {
			for _, native := range []bool{false, true} {
				kind := map[bool]string{false: "int", true: "native"}[native]
				b.Run(fmt.Sprintf("%s/%s/%s", l.Name, dt, kind), func(b *testing.B) {
					b.SetBytes(n)
					for range b.N {
						if st, err := lib.Call(fmt.Sprintf("w_%s_%t%s", dt, native, l.Suffix), in.Ptr(), out.Ptr(), n); err != nil || st != 0 {
							b.Fatal(st, err)
						}
					}
				})
			}
		}
		if l.Name == best {
			break
		}
	}
}

// TestF16ToF32Exhaustive evaluates ir.F16ToF32, the integer widening the
// levels without F16C use (and the GPU sources), on every half bit
// pattern in the interpreter: the f32 of its value (f16ValueOf, from the
// format's definition; every half value is an f32), and for NaN the sign
// and payload kept (payload in the top mantissa bits). That it passes no
// f32 subnormal on the way, so that DAZ changes nothing, the conformance
// test TestDecodeUnderFlushDenormals checks in compiled code.
func TestF16ToF32Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, err := ir.EvalExpr(ir.F16ToF32(ir.IntT(ir.I16, int64(int16(uint16(h))))), nil)
		if err != nil {
			t.Fatal(err)
		}
		g := math.Float32bits(got.(float32))
		want := f16ValueOf(uint16(h))
		if math.IsNaN(want) {
			if w := uint32(h&0x8000)<<16 | 0x7f800000 | uint32(h&0x3ff)<<13; g != w {
				t.Fatalf("half %#04x: got %#08x, want NaN %#08x", h, g, w)
			}
			continue
		}
		if w := math.Float32bits(float32(want)); g != w || float64(float32(want)) != want {
			t.Fatalf("half %#04x: got %#08x (%v), want %#08x (%v)", h, g, got, w, want)
		}
	}
}
