package ir

// accessType reports whether a buffer of element type elem may be read or
// written as type t: its own type, or, for a storage-only type (f16, bf16),
// its carrier (legalized code moves their bits). The text form writes such
// a read as buf[i]:T. A vector of such a type accesses consecutive
// elements.
func accessType(elem, t Type) bool {
	t = t.Elem() // a vector access reads or writes consecutive elements
	if elem == t {
		return true
	}
	r := StorageOf(elem)
	return r != nil && r.Carrier == t && r.Type != t
}
