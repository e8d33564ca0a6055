// Package cstyle prints legalized GPU kernel IR as C++ for a GPU language
// given by a Dialect: the core is one table of op -> text (operators,
// the helpers it calls, constants, conversions), the statements and loops
// (grid-stride parallel loops, threads loops, shared arrays carved from
// dynamic shared memory, register arrays) and, from the module's plans,
// host launchers (checks, limits, the split rule, scratch, launches). A
// Dialect sets what differs between GPU languages: kernel qualifiers and
// launch bounds, thread and block indices, barrier, shuffles, shared
// memory, async copies, matrix fragments, types, the prelude and the host
// runtime names. codegen/cuda declares CUDA's.
//
// cstyle imports ir only; it must not import frontend, lower, passes,
// registry or a target.
package cstyle
