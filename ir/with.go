package ir

// WithDef returns a shallow copy of m whose Def named d.Name is d (appended
// when m has none); m itself is unchanged. A pass that rewrites the mask or
// score of a variant before inline-defs replaces that Def this way:
//
//	d := m.Def("mask")
//	window := Bin(Le, Bin(Sub, R("q_pos", I32), R("kv_pos", I32)), Int(1023))
//	return m.WithDef(&Def{Name: d.Name, Params: d.Params, Body: Bin(And, d.Body, window)}), nil
func (m *Module) WithDef(d *Def) *Module {
	out := *m
	out.Defs = make([]*Def, 0, len(m.Defs)+1)
	replaced := false
	for _, old := range m.Defs {
		if old.Name == d.Name {
			out.Defs = append(out.Defs, d)
			replaced = true
			continue
		}
		out.Defs = append(out.Defs, old)
	}
	if !replaced {
		out.Defs = append(out.Defs, d)
	}
	return &out
}
