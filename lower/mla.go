package lower

import "github.com/attnc/attnc/ir"

// MLA (absorbed, DeepSeek): one latent kv head whose key row is the
// compressed KV (kv_lora_rank wide) followed by its RoPE part (rope_dim),
// and whose value row is the compressed KV itself. Queries come in the
// same two parts. Lowering sees this as rows held in segments: a logical
// row's elements [off, off+w) live in their own buffer. Every other
// variant has one segment per row.

// segment is elements [off, off+w) of a logical Q, K or V row, held in buf.
type segment struct {
	buf    string
	off, w int
}

func (l *lowering) qSegs() []segment {
	if m := l.v.MLA; m != nil {
		return []segment{{"q_nope", 0, m.KVLoraRank}, {"q_pe", m.KVLoraRank, m.RopeDim}}
	}
	return []segment{{"q", 0, l.D}}
}

func (l *lowering) kSegs() []segment {
	if m := l.v.MLA; m != nil {
		return []segment{{"ckv_pages", 0, m.KVLoraRank}, {"kpe_pages", m.KVLoraRank, m.RopeDim}}
	}
	k, _ := l.pt.bufs()
	return []segment{{k, 0, l.D}}
}

func (l *lowering) vSegs() []segment {
	if m := l.v.MLA; m != nil {
		return []segment{{"ckv_pages", 0, m.KVLoraRank}}
	}
	_, v := l.pt.bufs()
	return []segment{{v, 0, l.DV}}
}

// qParams are the query arguments for rows named rows.
func (l *lowering) qParams(rows string) []*ir.Param {
	var ps []*ir.Param
	for _, s := range l.qSegs() {
		ps = append(ps, buf(s.buf, l.dt, false, rows, itoa(l.H), itoa(s.w)))
	}
	return ps
}

// pageParams are the cache pool arguments.
func (l *lowering) pageParams(out bool) []*ir.Param {
	if m := l.v.MLA; m != nil {
		return []*ir.Param{
			buf("ckv_pages", l.kvt, out, "num_pages", itoa(l.PS), itoa(m.KVLoraRank)),
			buf("kpe_pages", l.kvt, out, "num_pages", itoa(l.PS), itoa(m.RopeDim)),
		}
	}
	return []*ir.Param{buf("k_pages", l.kvt, out, l.pageShape(l.D)...), buf("v_pages", l.kvt, out, l.pageShape(l.DV)...)}
}

// scaleParams are a quantized cache's scales, which follow the pools:
// k_scale and v_scale, f32[1] or f32[kv_heads]; MLA's one latent cache
// (ckv and kpe) has one, k_scale. None for a plain cache.
func (l *lowering) scaleParams() []*ir.Param {
	if !l.v.Quantized() {
		return nil
	}
	n := itoa(l.v.ScaleLen())
	if l.v.MLA != nil {
		return []*ir.Param{buf("k_scale", ir.F32, false, n)}
	}
	return []*ir.Param{buf("k_scale", ir.F32, false, n), buf("v_scale", ir.F32, false, n)}
}

// vScaleName is the scale of the value rows: MLA's values are its latent
// cache, scaled by k_scale.
func (l *lowering) vScaleName() string {
	if l.v.MLA != nil {
		return "k_scale"
	}
	return "v_scale"
}

// kvScale loads kv head kvh's scale from buffer name (a quantized cache).
func (l *lowering) kvScale(name string, kvh ir.Expr) ir.Expr {
	if l.v.KVScale == ir.KVScalePerHead {
		return ld(name, ir.F32, kvh)
	}
	return ld(name, ir.F32, i32(0))
}

// kvLoad is the dequantizing load of cache element idx of pool buf as f32:
// the dtype table's exact conversion of what the pool stores (an 8-bit
// code's value, without its scale, which the skeleton folds into the score
// scale (K) and the output (V); legalize-dtype writes it as bit
// manipulation on the loaded bits, which vectorizes).
func (l *lowering) kvLoad(buf string, idx ir.Expr) ir.Expr { return tof32(ld(buf, l.kvt, idx)) }

// segName suffixes names bound per segment: empty for a whole row.
func segName(s segment) string {
	if s.off == 0 && (s.buf == "q" || s.buf == "k_pages" || s.buf == "v_pages" || s.buf == "k" || s.buf == "v") {
		return ""
	}
	return "_" + s.buf
}
