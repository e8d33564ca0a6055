package conformance

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/reference"
	"github.com/attnc/attnc/targets/cpu"
)

// TestDecodeUnderFlushDenormals runs decode with the calling thread's
// MXCSR at DAZ and FTZ (cpurt.MXCSRFlushDenormals: what PyTorch's
// set_flush_denormal(True) and -ffast-math's crtfastmath.o leave in a
// thread; since the entries set the default environment themselves,
// TestCallerFPEnvironment, DAZ no longer reaches the widenings, and this
// keeps the 8-bit and f16 subnormal inputs under that caller) over K and
// V values that are subnormal in their storage format but
// normal f32 values — every e4m3 and e5m2 subnormal code and zero, f16
// subnormals — at the host's level and at the baseline x86-64 level
// (its integer widenings), at 1, 2 and 4 threads: denormals-are-zero
// reads only f32 subnormals as zero, so a kernel that widens these values
// exactly gives the reference's outputs; one that passes them through f32
// subnormals gives zeros (the e4m3 widening to the f32 bits of value /
// 2^120, tried in 1a876f7, failed here with o = 0, and so did the
// baseline level's integer widenings before they rebiased with integer
// adds).
func TestDecodeUnderFlushDenormals(t *testing.T) {
	t.Parallel()
	needTools(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("MXCSR is x86-64's")
	}
	for _, kv := range []string{"e4m3", "e5m2", "f16"} {
		t.Run(kv, func(t *testing.T) {
			cache := fmt.Sprintf("paged(page_size = 16, kv_dtype = %s, kv_scale = per_tensor)", kv)
			if kv == "f16" {
				cache = "paged(page_size = 16)"
			}
			v := spec(t, fmt.Sprintf(`variant daz { heads qo = 8, kv = 2
			  head_dim 128
			  dtype f16
			  cache %s
			  kernels decode }`, cache))
			host, base := hostAndBaseline(t, v)
			rng := rand.New(rand.NewSource(7))
			c := reference.NewCase(v, rng, reference.CaseSpec{QLens: []int{1, 1, 1}, KVLens: []int{517, 64, 200}})
			sub := subnormals(t, v)
			for _, pages := range [][]float32{c.KPages, c.VPages} {
				for i := range pages {
					pages[i] = sub[rng.Intn(len(sub))]
				}
			}
			// Scales that make the largest subnormal code about 1 (e4m3
			// 7 · 2^-9 · 2^7, e5m2 3 · 2^-16 · 2^14): the generator's
			// scales (about 1 / the format's largest value) would leave
			// e5m2's outputs below f16's smallest subnormal, where o = 0
			// passes.
			for i := range c.KScale {
				c.KScale[i] = map[ir.DType]float32{ir.DTE4M3: 0x1p7, ir.DTE5M2: 0x1p14}[v.KVDType]
				c.VScale[i] = c.KScale[i]
			}
			if o, _ := reference.Attention(v, c); !outputsVisible(o) {
				t.Fatalf("%s: most outputs of the case are under 4 · 2^-24: a kernel that reads the values as zero would pass", kv)
			}
			for _, s := range []*Suite{host, base} {
				s.FPEnv = cpurt.MXCSRFlushDenormals
				for _, threads := range []int{1, 2, 4} {
					r := s.RunAttentionCase(ir.RoleDecode, c, threads)
					if !r.Pass {
						t.Fatalf("%s at %s, %d threads, DAZ and FTZ set: %s (max err %.3g ulp)", kv, s.Level, threads, r.Note, r.MaxErr)
					}
				}
				t.Logf("%s at %s: passes under DAZ and FTZ at 1, 2 and 4 threads", kv, s.Level)
			}
		})
	}
}

// hostAndBaseline builds v at the host's level and at x86-64 and returns
// the suite at the host's level and the one forced to x86-64, both closed
// when t ends.
func hostAndBaseline(t *testing.T, v *ir.Variant) (host, base *Suite) {
	t.Helper()
	host, err := BuildWith(v, t.TempDir(), Options{CPULevels: []string{"x86-64", cpu.HostLevel}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Lib.Close() })
	base, err = host.AtLevel("x86-64")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { base.Lib.Close() })
	return host, base
}

// subnormals are the values of v's K/V storage type that are subnormal in
// it, with zero and their negatives: every code 0x00-0x07 (e4m3) or
// 0x00-0x03 (e5m2) with either sign, or f16's subnormals 1..1023 · 2^-24
// in steps.
func subnormals(t *testing.T, v *ir.Variant) []float32 {
	t.Helper()
	var out []float32
	switch v.KVDType {
	case ir.DTE4M3, ir.DTE5M2:
		n := 8
		if v.KVDType == ir.DTE5M2 {
			n = 4
		}
		for c := 0; c < n; c++ {
			for _, sign := range []int{0, 0x80} {
				out = append(out, float32(reference.CodeValue(v.KVDType, uint8(c|sign))))
			}
		}
	default:
		for m := 0; m < 1024; m += 37 {
			x := float32(m) * 0x1p-24
			out = append(out, x, -x)
		}
	}
	if len(out) == 0 {
		t.Fatal("no subnormal values")
	}
	return out
}

// outputsVisible reports whether most outputs o are at least 4 · 2^-24 in
// magnitude (four steps of f16's smallest subnormal), so that an f16 o of
// zeros fails the comparison.
func outputsVisible(o []float64) bool {
	n := 0
	for _, x := range o {
		if math.Abs(x) >= 0x1p-22 {
			n++
		}
	}
	return 2*n > len(o)
}

// TestCallerFPEnvironment runs prefill and decode of an f32 and a bf16
// variant (GQA, causal, page 16), 2 threads, with the calling thread's
// floating-point control register in environments other than the default
// — on x86-64 at the host's level and at x86-64, MXCSR at DAZ and FTZ (the
// first call of each library, which starts its workers), each rounding
// mode other than nearest, the invalid, divide-by-zero and overflow
// exceptions unmasked; on aarch64 (under qemu, -aarch64.all) FPCR at FZ
// (first), FZ with default NaNs, each other rounding mode — over V values
// below f32's normal range (bf16's subnormals, and f32's: outputs made of
// them), and checks every output bit for bit against the same call in the
// default environment (Result.Digest), and against the reference. The
// kernels set the default themselves (targets/cpu's entry wrappers):
// before, on x86-64, DAZ read those V values as zero (bf16's outputs 127
// ulp off), a later call in the default environment came out 17 ulp off
// (the workers the first call started kept its DAZ), the rounding modes
// changed the sums' bits, and an unmasked invalid operation trapped
// (SIGFPE) on the softmax of hidden positions.
func TestCallerFPEnvironment(t *testing.T) {
	t.Parallel()
	needTools(t)
	type fpEnv struct {
		name string
		csr  uint32
	}
	x86Envs := []fpEnv{
		{"DAZ and FTZ", cpurt.MXCSRFlushDenormals},
		{"round down", 0x1f80 | 1<<13},
		{"round up", 0x1f80 | 2<<13},
		{"round toward zero", 0x1f80 | 3<<13},
		{"invalid, divide-by-zero and overflow unmasked", 0x1f80 &^ (1<<7 | 1<<9 | 1<<10)},
	}
	armEnvs := []fpEnv{
		{"FZ", 1 << 24},
		{"FZ and default NaN", 1<<24 | 1<<25},
		{"round up", 1 << 22},
		{"round down", 2 << 22},
		{"round toward zero", 3 << 22},
	}
	for _, dt := range []string{"f32", "bf16"} {
		v := spec(t, fmt.Sprintf(`variant fpenv_%s { heads qo = 8, kv = 2
		  head_dim 64
		  dtype %s
		  cache paged(page_size = 16)
		  mask causal }`, dt, dt))
		// V below 2^-126: bf16's subnormals (down to 2^-133), or f32's
		// (down to 2^-149), with random signs and mantissas.
		low := map[string]int{"f32": -149, "bf16": -133}[dt]
		mk := func(seed int64, qlens []int) *reference.Case {
			rng := rand.New(rand.NewSource(seed))
			c := reference.NewCase(v, rng, reference.CaseSpec{QLens: qlens, KVLens: []int{150, 77, 64}})
			for i := range c.VPages {
				x := math.Ldexp(1+rng.Float64(), low+rng.Intn(-126-low))
				if rng.Intn(2) == 0 {
					x = -x
				}
				c.VPages[i] = reference.Round(v.DType, float32(x))
			}
			return c
		}
		check := func(t *testing.T, s *Suite, envs []fpEnv) {
			for _, role := range []ir.Role{ir.RolePrefill, ir.RoleDecode} {
				c := mk(11, []int{37, 1, 64})
				if role == ir.RoleDecode {
					c = mk(12, []int{1, 1, 1})
				}
				got := map[string]Result{}
				for _, env := range envs {
					s.FPEnv = env.csr
					got[env.name] = s.RunAttentionCase(role, c, 2)
				}
				s.FPEnv = 0
				want := s.RunAttentionCase(role, c, 2)
				if !want.Pass {
					t.Errorf("%s at %s, default environment: %s", role, s.Level, want)
				}
				for _, env := range envs {
					r := got[env.name]
					if !r.Pass || r.Digest != want.Digest {
						t.Errorf("%s at %s, %s (%#x): digest %#x, default %#x: %s", role, s.Level, env.name, env.csr, r.Digest, want.Digest, r)
					}
				}
			}
		}
		t.Run(dt, func(t *testing.T) {
			t.Parallel()
			if runtime.GOARCH != "amd64" {
				t.Skip("MXCSR is x86-64's")
			}
			host, base := hostAndBaseline(t, v)
			check(t, host, x86Envs)
			check(t, base, x86Envs)
		})
		t.Run(dt+"_aarch64", func(t *testing.T) {
			t.Parallel()
			if !*aarch64All {
				t.Skip("aarch64 under qemu runs with -aarch64.all (CI's long pass)")
			}
			check(t, buildAArch64(t, v), armEnvs)
		})
	}
}
