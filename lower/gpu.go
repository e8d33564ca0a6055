package lower

import (
	"github.com/attnc/attnc/ir"
)

// GPU schedule constants: a block of GPUThreads threads (4 warps) serves
// one work item; K/V tiles of GPUKVTile positions are staged in shared
// memory; a work item holds up to GPURows (head, query) rows.
const (
	GPUThreads = 128
	GPUKVTile  = 32
	GPURows    = 16
)

// GPUQTile is the query rows per GPU work item for group size g.
func GPUQTile(g int) int {
	if g >= GPURows {
		return 1
	}
	return GPURows / g
}

// GPUModule is a variant lowered for CUDA: the device kernels (kernel IR
// that passes legalize and the CUDA printer prints) and the host launchers
// the registry chose.
type GPUModule struct {
	Module    *ir.Module
	Launchers []ir.Launcher
	// Lowered is Module as lowering built it, once Module has been through
	// the pass pipeline: its parameters keep the storage dtypes.
	Lowered *ir.Module
}

// LowerGPU builds the CUDA schedule of v from the same pieces as Lower:
// the mask/score/plan Defs, the page walk, the online-softmax update and
// the merge formula; only the mapping of loops to blocks, threads and
// shared memory differs.
func LowerGPU(v *ir.Variant) (*GPUModule, error) {
	if err := Unsupported(v); err != nil {
		return nil, err
	}
	l := &lowering{v: v, dt: v.DType.Type(), H: v.QOHeads, KVH: v.KVHeads, G: v.GroupSize(),
		D: v.HeadDimQK, DV: v.HeadDimV, PS: v.PageSize, p: v.Name}
	m := &ir.Module{Name: v.Name + "_cuda", Prefix: v.Name, Errors: append(append([]ir.ErrorCode(nil), Errors...), ErrorLaunch)}
	m.Defs = []*ir.Def{MaskDef(v), ScoreDef(v), PlanSplitsDef()}
	gm := &GPUModule{Module: m}
	attnParams := func(decode bool) []*ir.Param {
		if decode {
			return l.decodeParams()
		}
		return l.prefillParams()
	}
	bs, np := ir.R("batch_size", ir.I32), ir.R("num_pages", ir.I32)
	attnChecks := []ir.Check{{Fail: lt(bs, i32(0)), Code: ErrBadArgument}, {Fail: lt(np, i32(0)), Code: ErrBadArgument}}
	if v.Table == ir.BlockTable {
		attnChecks = append(attnChecks, ir.Check{Fail: lt(ir.R("max_blocks", ir.I32), i32(0)), Code: ErrBadArgument})
	}
	noSeqs := eq(bs, i32(0))
	// tooLarge rejects a grid of more than MaxItems blocks (counted in i64).
	tooLarge := func(n ir.Expr, per int) ir.Check {
		return ir.Check{Fail: gt(mul(i64(n), i64c(per)), i64c(MaxItems)), Code: ErrTooLarge}
	}
	smem := l.gpuPlanFor(false, false).smem
	dsmem := l.gpuPlanFor(true, false).smem
	dHT := l.gpuPlanFor(true, false).HT
	if v.HasRole(ir.RolePrefill) {
		k := l.gpuAttention(l.name("prefill_gpu"), attnParams(false), false, false)
		m.Kernels = append(m.Kernels, k)
		gm.Launchers = append(gm.Launchers, ir.Launcher{Name: l.name("prefill_launch"), Role: ir.RolePrefill,
			Params: attnParams(false), Checks: attnChecks, Skip: noSeqs, Direct: []ir.Launch{{Kernel: k.Name, Grid: "4 * attnc_num_sms()", Block: GPUThreads, Smem: smem}}})
	}
	if v.HasRole(ir.RoleDecode) {
		direct := l.gpuAttention(l.name("decode_gpu"), attnParams(true), true, false)
		split := l.gpuAttention(l.name("decode_split_gpu"), append(attnParams(true)[:len(l.qParams(""))+len(l.maskParams(""))+len(l.ropeParams(""))+len(l.cacheParams())],
			buf("part_o", ir.F32, true, "splits", "batch_size", itoa(l.H), itoa(l.DV)),
			buf("part_lse", ir.F32, true, "splits", "batch_size", itoa(l.H)), scalar("splits")), true, true)
		merge := l.gpuMergeSplits()
		m.Kernels = append(m.Kernels, direct, split, merge)
		gm.Launchers = append(gm.Launchers, ir.Launcher{Name: l.name("decode_launch"), Role: ir.RoleDecode,
			Params: attnParams(true), Checks: append(attnChecks[:len(attnChecks):len(attnChecks)], tooLarge(bs, l.KVH*dHT)), Skip: noSeqs,
			Direct: []ir.Launch{{Kernel: direct.Name, Grid: "batch_size * " + itoa(l.KVH*dHT), Block: GPUThreads, Smem: dsmem}},
			Split: []ir.Launch{{Kernel: split.Name, Grid: "batch_size * " + itoa(l.KVH*dHT) + " * splits", Block: GPUThreads, Smem: dsmem},
				{Kernel: merge.Name, Grid: "batch_size * " + itoa(l.H), Block: GPUThreads}}})
	}
	if v.HasRole(ir.RoleMergeState) {
		k := l.gpuMergeState()
		m.Kernels = append(m.Kernels, k)
		gm.Launchers = append(gm.Launchers, ir.Launcher{Name: l.name("merge_state_launch"), Role: ir.RoleMergeState,
			Params: k.Params, Checks: []ir.Check{{Fail: lt(ir.R("n", ir.I32), i32(0)), Code: ErrBadArgument}, tooLarge(ir.R("n", ir.I32), l.H)},
			Skip: eq(ir.R("n", ir.I32), i32(0)), Direct: []ir.Launch{{Kernel: k.Name, Grid: "n * " + itoa(l.H), Block: GPUThreads}}})
	}
	if v.HasRole(ir.RoleAppend) {
		k := l.appendKernel(l.name("append_gpu"), true)
		m.Kernels = append(m.Kernels, k)
		gm.Launchers = append(gm.Launchers, ir.Launcher{Name: l.name("append_launch"), Role: ir.RoleAppend,
			Params: k.Params, Checks: []ir.Check{{Fail: or(lt(ir.R("n", ir.I32), i32(0)), lt(np, i32(0))), Code: ErrBadArgument}, tooLarge(ir.R("n", ir.I32), l.KVH)},
			Skip: eq(ir.R("n", ir.I32), i32(0)), Direct: []ir.Launch{{Kernel: k.Name, Grid: "n * " + itoa(l.KVH), Block: GPUThreads}}})
	}
	if v.HasRole(ir.RoleCopyPage) {
		k := l.copyPageKernel(l.name("copy_page_gpu"), true)
		m.Kernels = append(m.Kernels, k)
		gm.Launchers = append(gm.Launchers, ir.Launcher{Name: l.name("copy_page_launch"), Role: ir.RoleCopyPage,
			Params: k.Params, Checks: l.copyPageChecks(), Skip: eq(ir.R("length", ir.I32), i32(0)),
			Direct: []ir.Launch{{Kernel: k.Name, Grid: "length * " + itoa(l.KVH), Block: GPUThreads}}})
	}
	return gm, nil
}

// ErrorLaunch is the status a CUDA launcher returns when the runtime
// reports an error.
var ErrorLaunch = ir.ErrorCode{Code: -8, Name: "launch_failed", Msg: "the CUDA runtime reported an error launching a kernel"}

// gpuQT is the query rows of a GPU work item.
func (l *lowering) gpuQT(decode bool) int {
	if decode {
		return 1
	}
	return GPUQTile(l.G)
}

// strided appends `for k in 0 .. ceil(n/NT) { let e = t + k*NT; if e < n { body(e) } }`:
// thread t's share of n independent elements. It returns the loop.
func strided(b *blk, name string, n int, body func(*blk, ir.Expr)) *ir.For {
	t := ir.R("t", ir.I32)
	k := ir.R(name+"_k", ir.I32)
	return b.loop(name+"_k", i32(0), i32((n+GPUThreads-1)/GPUThreads), ir.Serial, "", func(u *blk) {
		e := u.let(name, add(t, mul(k, i32(GPUThreads))))
		if n%GPUThreads == 0 {
			body(u, e)
			return
		}
		u.when(lt(e, i32(n)), func(x *blk) { body(x, e) })
	})
}

func roleOf(decode bool) ir.Role {
	if decode {
		return ir.RoleDecode
	}
	return ir.RolePrefill
}

// gpuRowStats is the online-softmax update on the GPU: warp w takes rows
// w, w+4, ...; its lanes split the tile's positions, reduce the max and
// the sum of exp(s - max) with butterfly shuffles, and lane 0 records the
// row's new max, denominator and the rescale factor alpha for the
// accumulate phase.
func (l *lowering) gpuRowStats(b *blk, R, KT int, warp, lane ir.Expr, halfP bool) {
	NW := GPUThreads / 32
	JJ := (KT + 31) / 32
	b.loop("rk", i32(0), i32((R+NW-1)/NW), ir.Serial, "", func(x *blk) {
		row := x.let("row", add(warp, mul(ir.R("rk", ir.I32), i32(NW))))
		x.when(lt(row, i32(R)), func(y *blk) {
			col := func(z *blk) ir.Expr {
				return z.let("j", add(lane, mul(ir.R("jj", ir.I32), i32(32))))
			}
			y.vr("m", negInf())
			m := ir.R("m", ir.F32)
			y.loop("jj", i32(0), i32(JJ), ir.Serial, "", func(z *blk) {
				j := col(z)
				z.when(lt(j, i32(KT)), func(u *blk) { u.set("m", maxE(m, ld("sc", ir.F32, add(mul(row, i32(KT)), j)))) })
			})
			for s := 16; s >= 1; s /= 2 {
				y.set("m", maxE(m, &ir.Shuffle{X: m, Mask: s}))
			}
			mOld := y.let("m_old", ld("mx", ir.F32, row))
			mNew := y.let("m_new", maxE(mOld, m))
			live := gt(mNew, negInf())
			y.vr("ps", f32(0))
			ps := ir.R("ps", ir.F32)
			y.loop("jj", i32(0), i32(JJ), ir.Serial, "", func(z *blk) {
				j := col(z)
				z.when(lt(j, i32(KT)), func(u *blk) {
					i := u.let("si", add(mul(row, i32(KT)), j))
					p := u.let("p", sel(live, ir.Un(ir.Exp, sub(ld("sc", ir.F32, i), mNew)), f32(0)))
					u.store("sc", i, p)
					if halfP {
						l.splitP(u, i, p)
					}
					u.set("ps", add(ps, p))
				})
			})
			for s := 16; s >= 1; s /= 2 {
				y.set("ps", add(ps, &ir.Shuffle{X: ps, Mask: s}))
			}
			y.when(eq(lane, i32(0)), func(z *blk) {
				a := z.let("a", sel(live, ir.Un(ir.Exp, sub(mOld, mNew)), f32(1)))
				z.store("alpha", row, a)
				z.store("den", row, add(mul(ld("den", ir.F32, row), a), ps))
				z.store("mx", row, mNew)
			})
		})
	})
}

// gpuMergeSplits folds the split-KV chunks of each (sequence, qo head) row
// with the merge_state update: one block per row, threads over head dims.
func (l *lowering) gpuMergeSplits() *ir.Kernel {
	DV := l.DV
	params := []*ir.Param{
		buf("part_o", ir.F32, false, "splits", "batch_size", itoa(l.H), itoa(DV)),
		buf("part_lse", ir.F32, false, "splits", "batch_size", itoa(l.H)),
		scalar("splits"), scalar("batch_size"),
	}
	params = append(params, l.outParams("batch_size")...)
	var b blk
	row := ir.R("mrow", ir.I32)
	rowsPerSplit := mul(ir.R("batch_size", ir.I32), i32(l.H))
	b.loop("mrow", i32(0), rowsPerSplit, ir.Parallel, "work", func(w *blk) {
		w.loop("t", i32(0), i32(GPUThreads), ir.Threads, "", func(x *blk) {
			x.vr("mlse", l.mergeStart(row))
			x.alloc("macc", ir.F32, (DV+GPUThreads-1)/GPUThreads)
			l.gpuDims(x, func(y *blk, k, d ir.Expr) { y.store("macc", k, f32(0)) })
			x.loop("sp", i32(0), ir.R("splits", ir.I32), ir.Serial, "", func(y *blk) {
				pflat := y.let("pflat", add(mul(ir.R("sp", ir.I32), rowsPerSplit), row))
				l.pairMergeBy(y, ir.R("mlse", ir.F32), ld("part_lse", ir.F32, pflat),
					func(k, dv ir.Expr) ir.Expr { return ld("macc", ir.F32, k) },
					func(k, dv ir.Expr) ir.Expr { return ld("part_o", ir.F32, add(mul(pflat, i32(DV)), dv)) },
					func(z *blk, k, dv, val ir.Expr) { z.store("macc", k, val) },
					func(z *blk, val ir.Expr) { z.set("mlse", val) }, l.gpuDims, ir.LSEBaseE)
			})
			l.gpuDims(x, func(y *blk, k, d ir.Expr) {
				y.store("o", add(mul(i64(row), ir.IntT(ir.I64, int64(DV))), i64(d)), ir.Cvt(l.dt, ld("macc", ir.F32, k)))
			})
			x.when(and(eq(ir.R("t", ir.I32), i32(0)), &ir.NotNull{Buf: "lse"}), func(y *blk) { y.store("lse", row, l.userLSE(ir.R("mlse", ir.F32))) })
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: l.name("decode_merge_gpu"), Role: ir.RoleMergeState, Params: params, Body: b.block()}
}

// gpuDims runs body for thread t's head dims d = t + k*NT (k indexes the
// thread's registers).
func (l *lowering) gpuDims(b *blk, body func(b *blk, k, d ir.Expr)) {
	n := (l.DV + GPUThreads - 1) / GPUThreads
	b.loop("dk", i32(0), i32(n), ir.Serial, "", func(x *blk) {
		k := ir.R("dk", ir.I32)
		d := x.let("dd", add(ir.R("t", ir.I32), mul(k, i32(GPUThreads))))
		x.when(lt(d, i32(l.DV)), func(y *blk) { body(y, k, d) })
	})
}

// gpuMergeState is merge_state on the GPU: one block per (row, head).
func (l *lowering) gpuMergeState() *ir.Kernel {
	cpu := l.mergeState()
	DV := l.DV
	var b blk
	n := ir.R("n", ir.I32)
	row := ir.R("row", ir.I32)
	b.loop("row", i32(0), mul(n, i32(l.H)), ir.Parallel, "work", func(w *blk) {
		w.loop("t", i32(0), i32(GPUThreads), ir.Threads, "", func(x *blk) {
			base := x.let("base", mul(i64(row), ir.IntT(ir.I64, int64(DV))))
			x.alloc("mv", ir.F32, (DV+GPUThreads-1)/GPUThreads)
			l.pairMergeBy(x, ld("s", ir.F32, row), ld("s_other", ir.F32, row),
				func(k, dv ir.Expr) ir.Expr { return tof32(ld("v", l.dt, add(base, i64(dv)))) },
				func(k, dv ir.Expr) ir.Expr { return tof32(ld("v_other", l.dt, add(base, i64(dv)))) },
				func(y *blk, k, dv, val ir.Expr) { y.store("mv", k, val) },
				func(y *blk, val ir.Expr) { y.let("s_new", val) }, l.gpuDims, l.v.LSEBase)
			// Every thread read s[row] above; wait before thread 0 overwrites it.
			x.add(&ir.Barrier{})
			x.when(eq(ir.R("t", ir.I32), i32(0)), func(y *blk) { y.store("s", row, ir.R("s_new", ir.F32)) })
			l.gpuDims(x, func(y *blk, k, d ir.Expr) {
				y.store("v", add(base, i64(d)), ir.Cvt(l.dt, ld("mv", ir.F32, k)))
			})
		})
	})
	b.add(&ir.Return{Value: i32(0)})
	return &ir.Kernel{Name: l.name("merge_state_gpu"), Role: ir.RoleMergeState, Params: cpu.Params, Body: b.block()}
}
