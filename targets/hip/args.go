package hip

import (
	"maps"

	"github.com/attnc/attnc/codegen/cstyle"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/targets/gpu/host"
)

// ArgsAtUse says which parameters of an attention kernel (one with a KV
// tile loop) the printer reads from the kernel's argument segment where
// they are used (the prelude's ATTNC_ARG: a scalar load) rather than
// letting the compiler load every argument at the kernel's start and hold
// it in scalar registers through the tile loop: every buffer its KV tile
// loops do not mention, and every scalar. A wavefront has about 100 SGPRs
// (gfx942: s0–s101, VCC and the flat scratch and XNACK pairs counting
// against them), and an attention kernel's uniform values — table
// pointers, per-item bounds, LDS addresses, the exec masks of divergent
// branches (two SGPRs each on 64 lanes) — fill them: held arguments made
// the prefill and decode kernels with many table arguments, inline RoPE or
// the register accumulator spill SGPRs into VGPR lanes.
//
// Scalars and output buffers are read once per phase that uses them
// (cstyle.ArgPerPhase: the output stores and the split arithmetic would
// otherwise read them once per element), and at each use inside the tile
// loop (num_pages in the page walk: one SGPR less across it); the input
// buffers outside the tile loop (the query rows, the indptr tables) are
// read at each use, where Q's staging with inline RoPE needs every scalar
// register it has. The buffers the tile loop reads stay held: their
// addresses are formed in its innermost loops. Other kernels are printed
// as they are.
func ArgsAtUse(k *ir.Kernel) map[string]cstyle.ArgRead {
	if !host.HasTileLoop(k) {
		return nil
	}
	inLoop := map[string]bool{}
	ir.MapStmts(k.Body, func(s ir.Stmt) []ir.Stmt {
		if f, ok := s.(*ir.For); ok && f.Tag == ir.TagKVTile {
			maps.Copy(inLoop, cstyle.Mentions(f))
		}
		return []ir.Stmt{s}
	})
	out := map[string]cstyle.ArgRead{}
	for _, p := range k.Params {
		switch {
		case !p.Buffer || p.Output && !inLoop[p.Name]:
			out[p.Name] = cstyle.ArgPerPhase
		case !inLoop[p.Name]:
			out[p.Name] = cstyle.ArgEachUse
		}
	}
	return out
}
