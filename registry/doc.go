// Package registry decides which generated kernel serves which call and
// records it: the manifest (kernels, argument order, constraints, each
// entry's plan and each device kernel's launch) and Select, which
// evaluates a module's plans for a call shape with the IR interpreter — the
// very expressions the entries compile — the way a target's entry does
// (the CPU reads the lengths, a GPU launcher uses its stand-ins), so the Go
// API and the generated dispatch cannot disagree.
// It also states the page-reclaim rule of window variants
// (ReclaimableRange: which pages of a sequence no query can see again), so
// that engines do not re-derive it.
//
// registry imports ir only; it must not import lower, frontend, passes or
// codegen.
package registry
