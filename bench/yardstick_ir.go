package bench

import (
	"fmt"
	"strings"
)

// readUnroll is how many independent vector accumulators the read loops
// keep (loads in flight per iteration).
const readUnroll = 4

// clockAdds is the number of dependent 1-cycle integer adds per iteration
// of the clock loop.
const clockAdds = 100

// yardstickIR is an LLVM 14 module with the machine microbenchmarks, for
// vector level l with fmaAccs independent FMA accumulators:
//
//	void yard_read(i8 *p, i64 n, i64 *out)
//	    *out = the wrapping sum of p's n bytes as i64 words, read as
//	    readUnroll independent vector accumulators (n a multiple of
//	    readUnroll*l.VectorBytes; a tail is not read)
//	void yard_read_blocks(i8 *base, i64 *offsets, i64 nblocks, i64 block, i64 ahead, i64 *out)
//	    the same over block bytes at base+offsets[i] for each i in order;
//	    with ahead > 0, each block's loads also prefetch the block ahead
//	    places later in the order, line by line
//	void yard_fma(i64 iters, float *params, float *out)
//	    fmaAccs vector accumulators, each updated iters times by
//	    acc = acc*a + b (params = {a, b}); *out = the sum of their lanes
//	void yard_clock(i64 iters, i64 *out) (x86-64 only)
//	    iters*clockAdds dependent integer adds (inline assembly)
//
// The functions carry the level's vector width as their preferred and
// minimum legal width, so that llc keeps the full-width registers.
func yardstickIR(l Level, fmaAccs int) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w := l.VectorBytes
	lanes64, lanes32 := w/8, w/4
	vi := fmt.Sprintf("<%d x i64>", lanes64)
	vf := fmt.Sprintf("<%d x float>", lanes32)
	step := readUnroll * w

	p("; attnc bench machine yardsticks: %s (-mcpu=%s), %d-byte vectors, %d FMA accumulators", l.Name, l.MCPU, w, fmaAccs)
	p("")
	// yard_sum: the read loop, returning the sum; yard_sum_pf also
	// prefetches the same offsets of pf, one line per load.
	for _, pf := range []bool{false, true} {
		if pf {
			p("define internal i64 @yard_sum_pf(i8* %%p, i64 %%n, i8* %%pf) #1 {")
		} else {
			p("define internal i64 @yard_sum(i8* %%p, i64 %%n) #1 {")
		}
		p("entry:")
		p("  %%iters = udiv i64 %%n, %d", step)
		p("  %%any = icmp ugt i64 %%iters, 0")
		p("  br i1 %%any, label %%loop, label %%exit")
		p("loop:")
		p("  %%i = phi i64 [0, %%entry], [%%i1, %%loop]")
		for u := range readUnroll {
			p("  %%a%d = phi %s [zeroinitializer, %%entry], [%%b%d, %%loop]", u, vi, u)
		}
		p("  %%base = mul i64 %%i, %d", step)
		for u := range readUnroll {
			p("  %%o%d = add i64 %%base, %d", u, u*w)
			p("  %%q%d = getelementptr inbounds i8, i8* %%p, i64 %%o%d", u, u)
			p("  %%r%d = bitcast i8* %%q%d to %s*", u, u, vi)
			p("  %%l%d = load %s, %s* %%r%d, align 1", u, vi, vi, u)
			p("  %%b%d = add %s %%a%d, %%l%d", u, vi, u, u)
			if pf {
				for line := 0; line < w; line += 64 {
					p("  %%z%d_%d = getelementptr i8, i8* %%pf, i64 %%o%d", u, line, u)
					p("  %%zz%d_%d = getelementptr i8, i8* %%z%d_%d, i64 %d", u, line, u, line, line)
					p("  call void @llvm.prefetch.p0i8(i8* %%zz%d_%d, i32 0, i32 3, i32 1)", u, line)
				}
			}
		}
		p("  %%i1 = add i64 %%i, 1")
		p("  %%more = icmp ult i64 %%i1, %%iters")
		p("  br i1 %%more, label %%loop, label %%exit")
		p("exit:")
		for u := range readUnroll {
			p("  %%s%d = phi %s [zeroinitializer, %%entry], [%%b%d, %%loop]", u, vi, u)
		}
		prev := "%s0"
		for u := 1; u < readUnroll; u++ {
			p("  %%t%d = add %s %s, %%s%d", u, vi, prev, u)
			prev = fmt.Sprintf("%%t%d", u)
		}
		p("  %%sum = call i64 @llvm.vector.reduce.add.v%di64(%s %s)", lanes64, vi, prev)
		p("  ret i64 %%sum")
		p("}")
		p("")
	}
	p("define void @yard_read(i8* %%p, i64 %%n, i64* %%out) #0 {")
	p("  %%s = call i64 @yard_sum(i8* %%p, i64 %%n)")
	p("  store i64 %%s, i64* %%out")
	p("  ret void")
	p("}")
	p("")
	p("define void @yard_read_blocks(i8* %%base, i64* %%offsets, i64 %%nblocks, i64 %%block, i64 %%ahead, i64* %%out) #0 {")
	p("entry:")
	p("  %%any = icmp sgt i64 %%nblocks, 0")
	p("  %%last = add i64 %%nblocks, -1")
	p("  %%pf = icmp sgt i64 %%ahead, 0")
	p("  br i1 %%any, label %%loop, label %%exit")
	p("loop:")
	p("  %%i = phi i64 [0, %%entry], [%%i1, %%next]")
	p("  %%acc = phi i64 [0, %%entry], [%%acc1, %%next]")
	p("  %%op = getelementptr inbounds i64, i64* %%offsets, i64 %%i")
	p("  %%off = load i64, i64* %%op")
	p("  %%p = getelementptr inbounds i8, i8* %%base, i64 %%off")
	p("  br i1 %%pf, label %%ahead.on, label %%ahead.off")
	p("ahead.on:")
	p("  %%j0 = add i64 %%i, %%ahead")
	p("  %%jbig = icmp sgt i64 %%j0, %%last")
	p("  %%j = select i1 %%jbig, i64 %%last, i64 %%j0")
	p("  %%jp = getelementptr inbounds i64, i64* %%offsets, i64 %%j")
	p("  %%joff = load i64, i64* %%jp")
	p("  %%pfp = getelementptr inbounds i8, i8* %%base, i64 %%joff")
	p("  %%s1 = call i64 @yard_sum_pf(i8* %%p, i64 %%block, i8* %%pfp)")
	p("  br label %%next")
	p("ahead.off:")
	p("  %%s0 = call i64 @yard_sum(i8* %%p, i64 %%block)")
	p("  br label %%next")
	p("next:")
	p("  %%s = phi i64 [%%s1, %%ahead.on], [%%s0, %%ahead.off]")
	p("  %%acc1 = add i64 %%acc, %%s")
	p("  %%i1 = add i64 %%i, 1")
	p("  %%more = icmp slt i64 %%i1, %%nblocks")
	p("  br i1 %%more, label %%loop, label %%exit")
	p("exit:")
	p("  %%r = phi i64 [0, %%entry], [%%acc1, %%next]")
	p("  store i64 %%r, i64* %%out")
	p("  ret void")
	p("}")
	p("")
	// yard_fma: independent accumulators, each with its own start value so
	// that no two chains are the same computation.
	splat := func(name, x string) {
		p("  %%%s.0 = insertelement %s undef, float %s, i32 0", name, vf, x)
		p("  %%%s = shufflevector %s %%%s.0, %s undef, <%d x i32> zeroinitializer", name, vf, name, vf, lanes32)
	}
	p("define void @yard_fma(i64 %%iters, float* %%params, float* %%out) #0 {")
	p("entry:")
	p("  %%a = load float, float* %%params")
	p("  %%bp = getelementptr inbounds float, float* %%params, i64 1")
	p("  %%b = load float, float* %%bp")
	splat("va", "%a")
	splat("vb", "%b")
	for k := range fmaAccs {
		p("  %%x%d = fadd float %%b, %d.0", k, k+1)
		splat(fmt.Sprintf("init%d", k), fmt.Sprintf("%%x%d", k))
	}
	p("  %%any = icmp sgt i64 %%iters, 0")
	p("  br i1 %%any, label %%loop, label %%exit")
	p("loop:")
	p("  %%i = phi i64 [0, %%entry], [%%i1, %%loop]")
	for k := range fmaAccs {
		p("  %%c%d = phi %s [%%init%d, %%entry], [%%d%d, %%loop]", k, vf, k, k)
	}
	for k := range fmaAccs {
		if l.FMA {
			p("  %%d%d = call %s @llvm.fma.v%df32(%s %%c%d, %s %%va, %s %%vb)", k, vf, lanes32, vf, k, vf, vf)
		} else { // no fused instruction: a multiply and an add, the same two flops
			p("  %%m%d = fmul %s %%c%d, %%va", k, vf, k)
			p("  %%d%d = fadd %s %%m%d, %%vb", k, vf, k)
		}
	}
	p("  %%i1 = add i64 %%i, 1")
	p("  %%more = icmp slt i64 %%i1, %%iters")
	p("  br i1 %%more, label %%loop, label %%exit")
	p("exit:")
	for k := range fmaAccs {
		p("  %%e%d = phi %s [%%init%d, %%entry], [%%d%d, %%loop]", k, vf, k, k)
	}
	prev := "%e0"
	for k := 1; k < fmaAccs; k++ {
		p("  %%f%d = fadd %s %s, %%e%d", k, vf, prev, k)
		prev = fmt.Sprintf("%%f%d", k)
	}
	p("  %%r = call float @llvm.vector.reduce.fadd.v%df32(float 0.0, %s %s)", lanes32, vf, prev)
	p("  store float %%r, float* %%out")
	p("  ret void")
	p("}")
	if l.X86 {
		p("")
		asm := strings.Repeat(`addq $$1, $0\0A\09`, clockAdds)
		p("define void @yard_clock(i64 %%iters, i64* %%out) #0 {")
		p("entry:")
		p("  %%any = icmp sgt i64 %%iters, 0")
		p("  br i1 %%any, label %%loop, label %%exit")
		p("loop:")
		p("  %%i = phi i64 [0, %%entry], [%%i1, %%loop]")
		p("  %%x = phi i64 [0, %%entry], [%%y, %%loop]")
		p(`  %%y = call i64 asm sideeffect "%s", "=r,0,~{dirflag},~{fpsr},~{flags}"(i64 %%x)`, asm)
		p("  %%i1 = add i64 %%i, 1")
		p("  %%more = icmp slt i64 %%i1, %%iters")
		p("  br i1 %%more, label %%loop, label %%exit")
		p("exit:")
		p("  %%r = phi i64 [0, %%entry], [%%y, %%loop]")
		p("  store i64 %%r, i64* %%out")
		p("  ret void")
		p("}")
	}
	p("")
	p("declare i64 @llvm.vector.reduce.add.v%di64(%s)", lanes64, vi)
	p("declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)")
	p("declare float @llvm.vector.reduce.fadd.v%df32(float, %s)", lanes32, vf)
	if l.FMA {
		p("declare %s @llvm.fma.v%df32(%s, %s, %s)", vf, lanes32, vf, vf, vf)
	}
	p("")
	bits := 8 * w
	p(`attributes #0 = { nounwind "min-legal-vector-width"="%d" "prefer-vector-width"="%d" }`, bits, bits)
	p(`attributes #1 = { nounwind alwaysinline "min-legal-vector-width"="%d" "prefer-vector-width"="%d" }`, bits, bits)
	return b.String()
}
