package ir

// accessType reports whether a buffer of element type elem may be read or
// written as type t: its own type, or, for a storage-only type (f16, bf16),
// its carrier (legalized code moves their bits). The text form writes such
// a read as buf[i]:T.
func accessType(elem, t Type) bool {
	if elem == t {
		return true
	}
	r := StorageOf(elem)
	return r != nil && r.Carrier == t && r.Type != t
}
