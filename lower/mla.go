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
	return []segment{{"k_pages", 0, l.D}}
}

func (l *lowering) vSegs() []segment {
	if m := l.v.MLA; m != nil {
		return []segment{{"ckv_pages", 0, m.KVLoraRank}}
	}
	return []segment{{"v_pages", 0, l.DV}}
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
			buf("ckv_pages", l.dt, out, "num_pages", itoa(l.PS), itoa(m.KVLoraRank)),
			buf("kpe_pages", l.dt, out, "num_pages", itoa(l.PS), itoa(m.RopeDim)),
		}
	}
	return []*ir.Param{buf("k_pages", l.dt, out, l.pageShape(l.D)...), buf("v_pages", l.dt, out, l.pageShape(l.DV)...)}
}

// segName suffixes names bound per segment: empty for a whole row.
func segName(s segment) string {
	if s.off == 0 && (s.buf == "q" || s.buf == "k_pages" || s.buf == "v_pages") {
		return ""
	}
	return "_" + s.buf
}
