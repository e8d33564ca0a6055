package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnc/attnc/targets"
)

// The commands ask the registered targets what they offer (package
// targets' hooks) instead of naming them.

// harnessed lists the registered targets whose kernels run on this machine
// (targets.Harness): what verify accepts.
func harnessed() []string {
	var out []string
	for _, t := range targets.All() {
		if _, ok := t.(targets.Harness); ok {
			out = append(out, t.Name())
		}
	}
	return out
}

// deviceTargets lists the registered targets whose kernels run on an
// accelerator of this machine (targets.DeviceHarness): what --gpu runs.
func deviceTargets() []string {
	var out []string
	for _, t := range targets.All() {
		if _, ok := t.(targets.DeviceHarness); ok {
			out = append(out, t.Name())
		}
	}
	return out
}

// benchTargets lists the registered targets bench measures: those whose
// kernels run on this CPU's worker threads, and those with a device
// harness (with --gpu).
func benchTargets() []string {
	devs := deviceTargets()
	var out []string
	for _, t := range targets.Names() {
		if threaded(t) || slices.Contains(devs, t) {
			out = append(out, t)
		}
	}
	return out
}

// orList is "a or b or c".
func orList(names []string) string { return strings.Join(names, " or ") }

// gpuTarget is the target --gpu implies when --target is not given: the one
// registered target with a device harness.
func gpuTarget(cmd string) (string, error) {
	ds := deviceTargets()
	if len(ds) != 1 {
		return "", fmt.Errorf("%s: --gpu: name the target with --target (%s)", cmd, orList(ds))
	}
	return ds[0], nil
}

// tripleTarget names the target --triple applies to.
func tripleTarget() string {
	if t := targets.TripleTarget(); t != nil {
		return t.Name()
	}
	return "no"
}

// takesTriple reports whether the target named takes --triple.
func takesTriple(name string) bool {
	t, err := targets.Lookup(name)
	if err != nil {
		return false
	}
	_, ok := t.(targets.Triples)
	return ok
}

// threaded reports whether the target's kernels run on a worker count set
// at run time (the CPU's thread pool): cases run at every --threads.
func threaded(name string) bool {
	t, err := targets.Lookup(name)
	if err != nil {
		return false
	}
	r, ok := t.(targets.HostRuntime)
	return ok && r.RuntimeSymbols("").SetThreads != ""
}

// workersOf says what of a call shape sizes the target's parallel work
// (threads or sms); ok is false for a target that takes no count.
func workersOf(name string) (targets.Workers, bool) {
	t, err := targets.Lookup(name)
	if err != nil {
		return targets.Workers{}, false
	}
	w, ok := t.(targets.WorkerCount)
	if !ok {
		return targets.Workers{}, false
	}
	return w.Workers(), true
}

// defaultWorkers is the default count of the registered targets' workers
// named flag ("threads", "sms"): what explain assumes when it is not given
// (0 when no target takes one).
func defaultWorkers(flag string) int {
	for _, t := range targets.All() {
		if w, ok := t.(targets.WorkerCount); ok && w.Workers().Flag == flag {
			return w.Workers().Default
		}
	}
	return 0
}
