package ir

import (
	"fmt"
	"strings"
)

// IsIdent reports whether s is an identifier of C, CUDA C++ and LLVM IR
// alike: a letter or underscore, then letters, digits and underscores.
func IsIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// CheckNames checks that every module-level name that the backends print
// into C, CUDA or LLVM text (or a dump file name) is an identifier: the
// module's name and prefix, Def names and parameters, kernel names and
// parameters, plan entries, parameters, per-sequence values, scratch
// buffers and launched kernels, and status names (and status messages hold
// no */ or control character: the header prints them in comments). Verify checks the names declared inside kernel bodies. A name
// that is not an identifier would be pasted into the generated text (a
// prefix holding "*/" or a newline ends a comment of the header early).
func CheckNames(m *Module) error {
	bad := func(what, name string) error {
		return fmt.Errorf("%s %q is not an identifier (letters, digits and _, not starting with a digit)", what, name)
	}
	if !IsIdent(m.Name) {
		return bad("module name", m.Name)
	}
	if !IsIdent(m.Prefix) {
		return bad("module prefix", m.Prefix)
	}
	params := func(owner string, ps []*Param) error {
		for _, p := range ps {
			if p != nil && !IsIdent(p.Name) {
				return bad(owner+" parameter", p.Name)
			}
		}
		return nil
	}
	for _, d := range m.Defs {
		if d == nil {
			return fmt.Errorf("nil def")
		}
		if !IsIdent(d.Name) {
			return bad("def", d.Name)
		}
		if err := params("def "+d.Name, d.Params); err != nil {
			return err
		}
	}
	for _, k := range m.Kernels {
		if k == nil {
			continue // Verify reports it
		}
		if !IsIdent(k.Name) {
			return bad("kernel", k.Name)
		}
		if err := params("kernel "+k.Name, k.Params); err != nil {
			return err
		}
	}
	for _, p := range m.Plans {
		if p == nil {
			return fmt.Errorf("nil plan")
		}
		if !IsIdent(p.Entry) {
			return bad("entry", p.Entry)
		}
		if err := params("entry "+p.Entry, p.Params); err != nil {
			return err
		}
		for _, sv := range p.Seq {
			if !IsIdent(sv.Name) {
				return bad("per-sequence value", sv.Name)
			}
		}
		if p.Split != nil {
			for _, sc := range p.Split.Scratch {
				if !IsIdent(sc.Name) {
					return bad("scratch buffer", sc.Name)
				}
			}
		}
		for _, l := range PlanLaunches(p) {
			if !IsIdent(l.Kernel) {
				return bad("launched kernel", l.Kernel)
			}
		}
	}
	for _, e := range m.Errors {
		if !IsIdent(e.Name) {
			return bad("status", e.Name)
		}
		// The header prints the message in a /* */ comment on one line.
		if strings.Contains(e.Msg, "*/") || strings.IndexFunc(e.Msg, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
			return fmt.Errorf("status %s: message %q holds */ or a control character (it is printed in a C comment)", e.Name, e.Msg)
		}
	}
	return nil
}

// PlanLaunches lists every launch of p: its direct launches and its
// split step's.
func PlanLaunches(p *Plan) []Launch {
	out := append([]Launch(nil), p.Direct...)
	if p.Split != nil {
		out = append(out, p.Split.Launches...)
	}
	return out
}
