package ir

// Tag names the role of a loop or an if that passes look for. Tags are
// typed so that a misspelt tag is a compile error, not a pass that
// silently finds nothing; the text form writes them as @name.
type Tag uint8

const (
	// NoTag marks a statement no pass looks for.
	NoTag Tag = iota
	// TagWork is a parallel loop over independent work items.
	TagWork
	// TagKVTile is the walk over KV tiles of one work item; its Ranges
	// bound the position variables for classify-tiles.
	TagKVTile
	// TagStage is the loop that stages a K/V tile from the page pool.
	TagStage
	// TagMask is an if that hides a position: the one the @mask Def
	// does not show, and the one the data masks (tree, custom) do not.
	TagMask
	// TagValidate is an input validation loop.
	TagValidate
	// TagHidden marks a statement inside a KV tile that only matters for
	// positions the mask hides (it keeps their K/V, which may hold any
	// bits, out of the result): classify-tiles drops a tagged if or for,
	// and a tagged matmul's zero skip, from fully visible tiles.
	TagHidden
	// TagPhase is a loop map-threads made from a spread: one phase of a
	// GPU block, whose threads share memory only across barriers.
	TagPhase
	// TagFinite is an if whose condition has checked that the 8-bit codes
	// its Then branch reads hold no NaN code (the dtype table's NaNMask):
	// a CPU level that converts half natively widens them there without
	// the NaN path (FiniteHalfWiden). Both branches compute the same.
	TagFinite
)

var tagNames = [...]string{"", "work", "kv_tile", "stage", "mask", "validate", "hidden", "phase", "finite"}

func (t Tag) String() string {
	if int(t) < len(tagNames) {
		return tagNames[t]
	}
	return "tag?"
}

// TagByName maps a tag's text form (without @) back to the tag.
func TagByName(s string) (Tag, bool) {
	for i, n := range tagNames {
		if i > 0 && n == s {
			return Tag(i), true
		}
	}
	return NoTag, false
}
