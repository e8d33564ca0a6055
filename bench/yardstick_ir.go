package bench

import (
	"fmt"
	"strings"
)

// readUnroll is how many independent vector accumulators the read loops
// keep (loads in flight per iteration).
const readUnroll = 4

// clockOps is the number of dependent integer operations (multiplies, or
// adds) per iteration of the clock loops.
const clockOps = 100

// mulLatency is the latency in cycles of a 64-bit integer multiply (imul
// r64, r64) on every x86-64 core since Intel Nehalem and AMD K10, Zen 1 to
// 5 included: no core eliminates, fuses or folds a multiply, so a
// dependent chain of them runs at exactly this many cycles per multiply.
const mulLatency = 3

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
//	void yard_scan(i8 *kpool, i8 *vpool, i32 *table, i64 *geo, i64 *visits, i64 *items, i64 nitems, i64 *next, i64 ahead, i64 *out, i64 grain, i64 rgrain, i64 round, i64 l2)
//	    the paged-read scan (scan.go): claims runs of items from i = *next
//	    (compare-and-swap to i + g) while i < nitems — g = rgrain while at
//	    least round > 0 items are left, else grain, at most nitems - i —,
//	    running items i .. i+g-1; item i is {visit lo, visit hi, kv head} (3 words)
//	    and visit j is {page table index, first row, rows} (3 words); a
//	    visit reads the rows of the kv head in page table[index] of the K
//	    pool, then of the V pool, each pool laid out by geo = {page bytes,
//	    head stride, row stride, row bytes} (K, then V); with ahead > 0 it
//	    first prefetches, line by line, the blocks of visit j+ahead of the
//	    same item, into L1 (prefetcht0), or into L2 (prefetcht1) when l2
//	    is not 0. *out = the wrapping sum over every row run read (a run:
//	    its whole 8-byte words plus its remaining bytes, zero-extended; the
//	    rows of a block are one run when the row stride is the row size)
//	void yard_clock(i64 iters, i64 x, i64 c, i64 *out) (x86-64 only)
//	    x times c, iters*clockOps times, each multiply (imul r64, r64)
//	    depending on the last (inline assembly): *out = x*c^(iters*clockOps)
//	void yard_clock_add(i64 iters, i64 x, i64 c, i64 *out) (x86-64 only)
//	    x plus c, iters*clockOps times, register to register: *out = x +
//	    c*iters*clockOps
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
	scanIR(p, w, vi, lanes64, step)
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
		for _, c := range []struct{ name, op string }{{"yard_clock", "imulq"}, {"yard_clock_add", "addq"}} {
			asm := strings.Repeat(c.op+` $1, $0\0A\09`, clockOps)
			p("")
			p("define void @%s(i64 %%iters, i64 %%x0, i64 %%c, i64* %%out) #0 {", c.name)
			p("entry:")
			p("  %%any = icmp sgt i64 %%iters, 0")
			p("  br i1 %%any, label %%loop, label %%exit")
			p("loop:")
			p("  %%i = phi i64 [0, %%entry], [%%i1, %%loop]")
			p("  %%x = phi i64 [%%x0, %%entry], [%%y, %%loop]")
			p(`  %%y = call i64 asm sideeffect "%s", "=r,r,0,~{dirflag},~{fpsr},~{flags}"(i64 %%c, i64 %%x)`, asm)
			p("  %%i1 = add i64 %%i, 1")
			p("  %%more = icmp slt i64 %%i1, %%iters")
			p("  br i1 %%more, label %%loop, label %%exit")
			p("exit:")
			p("  %%r = phi i64 [%%x0, %%entry], [%%y, %%loop]")
			p("  store i64 %%r, i64* %%out")
			p("  ret void")
			p("}")
		}
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

// scanIR writes the paged-read scan (yard_scan) and its helpers, for
// vectors of w bytes (vi, lanes64 lanes of i64) read step bytes at a time
// by yard_sum.
func scanIR(p func(string, ...any), w int, vi string, lanes64, step int) {
	// yard_run: n bytes at p, as whole 8-byte words and remaining bytes.
	p("define internal i64 @yard_run(i8* %%p, i64 %%n) #1 {")
	p("entry:")
	p("  %%s0 = call i64 @yard_sum(i8* %%p, i64 %%n)")
	p("  %%steps = udiv i64 %%n, %d", step)
	p("  %%o0 = mul i64 %%steps, %d", step)
	p("  br label %%vec.head")
	p("vec.head:")
	p("  %%vo = phi i64 [%%o0, %%entry], [%%vo1, %%vec]")
	p("  %%va = phi %s [zeroinitializer, %%entry], [%%va1, %%vec]", vi)
	p("  %%vend = add i64 %%vo, %d", w)
	p("  %%vok = icmp ule i64 %%vend, %%n")
	p("  br i1 %%vok, label %%vec, label %%vec.done")
	p("vec:")
	p("  %%vq = getelementptr inbounds i8, i8* %%p, i64 %%vo")
	p("  %%vr = bitcast i8* %%vq to %s*", vi)
	p("  %%vl = load %s, %s* %%vr, align 1", vi, vi)
	p("  %%va1 = add %s %%va, %%vl", vi)
	p("  %%vo1 = add i64 %%vo, %d", w)
	p("  br label %%vec.head")
	p("vec.done:")
	p("  %%vs = call i64 @llvm.vector.reduce.add.v%di64(%s %%va)", lanes64, vi)
	p("  br label %%w.head")
	p("w.head:")
	p("  %%wo = phi i64 [%%vo, %%vec.done], [%%wo1, %%wd]")
	p("  %%wa = phi i64 [%%vs, %%vec.done], [%%wa1, %%wd]")
	p("  %%wend = add i64 %%wo, 8")
	p("  %%wok = icmp ule i64 %%wend, %%n")
	p("  br i1 %%wok, label %%wd, label %%b.head")
	p("wd:")
	p("  %%wq = getelementptr inbounds i8, i8* %%p, i64 %%wo")
	p("  %%wr = bitcast i8* %%wq to i64*")
	p("  %%wl = load i64, i64* %%wr, align 1")
	p("  %%wa1 = add i64 %%wa, %%wl")
	p("  %%wo1 = add i64 %%wo, 8")
	p("  br label %%w.head")
	p("b.head:")
	p("  %%bo = phi i64 [%%wo, %%w.head], [%%bo1, %%bd]")
	p("  %%ba = phi i64 [%%wa, %%w.head], [%%ba1, %%bd]")
	p("  %%bok = icmp ult i64 %%bo, %%n")
	p("  br i1 %%bok, label %%bd, label %%done")
	p("bd:")
	p("  %%bq = getelementptr inbounds i8, i8* %%p, i64 %%bo")
	p("  %%bl = load i8, i8* %%bq, align 1")
	p("  %%bz = zext i8 %%bl to i64")
	p("  %%ba1 = add i64 %%ba, %%bz")
	p("  %%bo1 = add i64 %%bo, 1")
	p("  br label %%b.head")
	p("done:")
	p("  %%r = add i64 %%ba, %%s0")
	p("  ret i64 %%r")
	p("}")
	p("")
	// yard_pf: prefetch the lines of [p, p+n) into L1 (locality 3,
	// prefetcht0); yard_pf_l2 into L2 (locality 2, prefetcht1: what the
	// kernels' prefetches use).
	for _, pf := range scanPrefetches {
		p("define internal void @yard_pf%s(i8* %%p, i64 %%n) #1 {", pf.suffix)
		p("entry:")
		p("  %%pi = ptrtoint i8* %%p to i64")
		p("  %%a = and i64 %%pi, -64")
		p("  %%e = add i64 %%pi, %%n")
		p("  %%any = icmp sgt i64 %%n, 0")
		p("  br i1 %%any, label %%loop, label %%exit")
		p("loop:")
		p("  %%x = phi i64 [%%a, %%entry], [%%x1, %%loop]")
		p("  %%xp = inttoptr i64 %%x to i8*")
		p("  call void @llvm.prefetch.p0i8(i8* %%xp, i32 0, i32 %d, i32 1)", pf.locality)
		p("  %%x1 = add i64 %%x, 64")
		p("  %%more = icmp ult i64 %%x1, %%e")
		p("  br i1 %%more, label %%loop, label %%exit")
		p("exit:")
		p("  ret void")
		p("}")
		p("")
	}
	// yard_block / yard_block_pf / yard_block_pf_l2: rows rows of rb
	// bytes, rs apart; one run when they are contiguous.
	blocks := []string{""}
	for _, pf := range scanPrefetches {
		blocks = append(blocks, "_pf"+pf.suffix)
	}
	for _, pf := range blocks {
		ret, fn, name := "i64", "yard_run", "yard_block"
		if pf != "" {
			ret, fn, name = "void", "yard"+pf, "yard_block"+pf
		}
		call := func(res, ptr, n string) {
			if pf != "" {
				p("  call void @%s(i8* %s, i64 %s)", fn, ptr, n)
			} else {
				p("  %s = call i64 @%s(i8* %s, i64 %s)", res, fn, ptr, n)
			}
		}
		p("define internal %s @%s(i8* %%p, i64 %%rows, i64 %%rs, i64 %%rb) #1 {", ret, name)
		p("entry:")
		p("  %%contig = icmp eq i64 %%rs, %%rb")
		p("  br i1 %%contig, label %%c, label %%pre")
		p("c:")
		p("  %%n = mul i64 %%rows, %%rb")
		call("%sc", "%p", "%n")
		p("  br label %%done")
		p("pre:")
		p("  %%any = icmp sgt i64 %%rows, 0")
		p("  br i1 %%any, label %%loop, label %%done")
		p("loop:")
		p("  %%r = phi i64 [0, %%pre], [%%r1, %%loop]")
		if pf == "" {
			p("  %%acc = phi i64 [0, %%pre], [%%acc1, %%loop]")
		}
		p("  %%off = mul i64 %%r, %%rs")
		p("  %%q = getelementptr inbounds i8, i8* %%p, i64 %%off")
		call("%s", "%q", "%rb")
		if pf == "" {
			p("  %%acc1 = add i64 %%acc, %%s")
		}
		p("  %%r1 = add i64 %%r, 1")
		p("  %%more = icmp slt i64 %%r1, %%rows")
		p("  br i1 %%more, label %%loop, label %%done")
		p("done:")
		if pf != "" {
			p("  ret void")
		} else {
			p("  %%res = phi i64 [%%sc, %%c], [0, %%pre], [%%acc1, %%loop]")
			p("  ret i64 %%res")
		}
		p("}")
		p("")
	}
	// yard_scan.
	p("define void @yard_scan(i8* %%kpool, i8* %%vpool, i32* %%table, i64* %%geo, i64* %%visits, i64* %%items, i64 %%nitems, i64* %%next, i64 %%ahead, i64* %%out, i64 %%grain, i64 %%rgrain, i64 %%round, i64 %%l2) #0 {")
	p("entry:")
	geo := []string{"kpb", "khs", "krs", "krb", "vpb", "vhs", "vrs", "vrb"}
	for i, g := range geo {
		p("  %%%s.p = getelementptr inbounds i64, i64* %%geo, i64 %d", g, i)
		p("  %%%s = load i64, i64* %%%s.p", g, g)
	}
	p("  %%dopf = icmp sgt i64 %%ahead, 0")
	p("  br label %%item")
	// Each grab takes consecutive items as the kernels' parallel_for does
	// (targets/cpu grabsPerThread; scanGrab): rgrain while at least round
	// items are left (round > 0), else grain, at most what is left; a
	// compare-and-swap of next claims them.
	p("item:")
	p("  %%acc = phi i64 [0, %%entry], [%%acc.v, %%next.item]")
	p("  %%first = load atomic i64, i64* %%next monotonic, align 8")
	p("  br label %%try")
	p("try:")
	p("  %%g = phi i64 [%%first, %%item], [%%found, %%claim]")
	p("  %%has = icmp slt i64 %%g, %%nitems")
	p("  br i1 %%has, label %%claim, label %%exit")
	p("claim:")
	p("  %%rest = sub i64 %%nitems, %%g")
	p("  %%runs = icmp sgt i64 %%round, 0")
	p("  %%plenty = icmp sge i64 %%rest, %%round")
	p("  %%whole = and i1 %%runs, %%plenty")
	p("  %%take0 = select i1 %%whole, i64 %%rgrain, i64 %%grain")
	p("  %%short = icmp slt i64 %%rest, %%take0")
	p("  %%take = select i1 %%short, i64 %%rest, i64 %%take0")
	p("  %%gend = add i64 %%g, %%take")
	p("  %%x = cmpxchg i64* %%next, i64 %%g, i64 %%gend monotonic monotonic")
	p("  %%found = extractvalue { i64, i1 } %%x, 0")
	p("  %%won = extractvalue { i64, i1 } %%x, 1")
	p("  br i1 %%won, label %%item.body, label %%try")
	p("item.body:")
	p("  %%it = phi i64 [%%g, %%claim], [%%it1, %%next.item]")
	p("  %%acci = phi i64 [%%acc, %%claim], [%%acc.v, %%next.item]")
	p("  %%ib = mul i64 %%it, 3")
	for i, f := range []string{"lo", "hi", "head"} {
		p("  %%%s.i = add i64 %%ib, %d", f, i)
		p("  %%%s.p = getelementptr inbounds i64, i64* %%items, i64 %%%s.i", f, f)
		p("  %%%s = load i64, i64* %%%s.p", f, f)
	}
	p("  %%kh = mul i64 %%head, %%khs")
	p("  %%vh = mul i64 %%head, %%vhs")
	p("  %%anyv = icmp slt i64 %%lo, %%hi")
	p("  br i1 %%anyv, label %%visit, label %%visits.done")
	// addr binds, for visit j, its rows and the K and V block pointers.
	addr := func(x, j string) {
		p("  %%%s.vb = mul i64 %s, 3", x, j)
		for i, f := range []string{"idx", "first", "rows"} {
			p("  %%%s.%s.i = add i64 %%%s.vb, %d", x, f, x, i)
			p("  %%%s.%s.p = getelementptr inbounds i64, i64* %%visits, i64 %%%s.%s.i", x, f, x, f)
			p("  %%%s.%s = load i64, i64* %%%s.%s.p", x, f, x, f)
		}
		p("  %%%s.pg.p = getelementptr inbounds i32, i32* %%table, i64 %%%s.idx", x, x)
		p("  %%%s.pg32 = load i32, i32* %%%s.pg.p", x, x)
		p("  %%%s.pg = sext i32 %%%s.pg32 to i64", x, x)
		for _, pool := range []string{"k", "v"} {
			p("  %%%s.%so1 = mul i64 %%%s.pg, %%%spb", x, pool, x, pool)
			p("  %%%s.%so2 = add i64 %%%s.%so1, %%%sh", x, pool, x, pool, pool)
			p("  %%%s.%so3 = mul i64 %%%s.first, %%%srs", x, pool, x, pool)
			p("  %%%s.%so = add i64 %%%s.%so2, %%%s.%so3", x, pool, x, pool, x, pool)
			p("  %%%s.%sp = getelementptr inbounds i8, i8* %%%spool, i64 %%%s.%so", x, pool, pool, x, pool)
		}
	}
	p("visit:")
	p("  %%j = phi i64 [%%lo, %%item.body], [%%j1, %%read]")
	p("  %%a = phi i64 [%%acci, %%item.body], [%%a1, %%read]")
	p("  %%pfj = add i64 %%j, %%ahead")
	p("  %%inr = icmp slt i64 %%pfj, %%hi")
	p("  %%pfok = and i1 %%dopf, %%inr")
	p("  br i1 %%pfok, label %%pf, label %%read")
	p("pf:")
	addr("f", "%pfj")
	p("  %%tol2 = icmp ne i64 %%l2, 0")
	p("  br i1 %%tol2, label %%pf.l2, label %%pf.l1")
	for _, pf := range scanPrefetches {
		p("pf.%s:", pf.level)
		p("  call void @yard_block_pf%s(i8* %%f.kp, i64 %%f.rows, i64 %%krs, i64 %%krb)", pf.suffix)
		p("  call void @yard_block_pf%s(i8* %%f.vp, i64 %%f.rows, i64 %%vrs, i64 %%vrb)", pf.suffix)
		p("  br label %%read")
	}
	p("read:")
	addr("r", "%j")
	p("  %%sk = call i64 @yard_block(i8* %%r.kp, i64 %%r.rows, i64 %%krs, i64 %%krb)")
	p("  %%sv = call i64 @yard_block(i8* %%r.vp, i64 %%r.rows, i64 %%vrs, i64 %%vrb)")
	p("  %%skv = add i64 %%sk, %%sv")
	p("  %%a1 = add i64 %%a, %%skv")
	p("  %%j1 = add i64 %%j, 1")
	p("  %%morev = icmp slt i64 %%j1, %%hi")
	p("  br i1 %%morev, label %%visit, label %%visits.done")
	p("visits.done:")
	p("  %%acc.v = phi i64 [%%acci, %%item.body], [%%a1, %%read]")
	p("  br label %%next.item")
	p("next.item:")
	p("  %%it1 = add i64 %%it, 1")
	p("  %%moreit = icmp slt i64 %%it1, %%gend")
	p("  br i1 %%moreit, label %%item.body, label %%item")
	p("exit:")
	p("  store i64 %%acc, i64* %%out")
	p("  ret void")
	p("}")
	p("")
}
