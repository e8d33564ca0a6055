// Package registry decides which generated kernel serves which call and
// records it: the manifest (kernels, argument order, constraints, dispatch
// rules) and Select, which evaluates for a call shape the same @plan_splits
// Def that the generated decode entry compiles in, so the Go API and the
// generated dispatch cannot disagree; and the page-reclaim rule of window
// variants (ReclaimableRange: which pages of a sequence no query can see
// again), so that engines do not re-derive it.
//
// registry imports ir and lower (for the tile sizes); it must not import
// frontend, passes or codegen.
package registry
