// Package registry decides which generated kernel serves which call and
// records it: the manifest (kernels, argument order, constraints, dispatch
// rules) and Select, which evaluates for a call shape the same @plan_splits
// Def that the generated decode entry compiles in, so the Go API and the
// generated dispatch cannot disagree.
//
// registry imports ir and lower (for the tile sizes); it must not import
// frontend, passes or codegen.
package registry
