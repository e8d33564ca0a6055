package cpu

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/passes"
)

// schedulePassNames is the CPU table's passes that are not the neutral
// ones, in table order: the passes docs/cpu.md documents.
func schedulePassNames() []string {
	var names []string
	for _, p := range Table {
		if !slices.ContainsFunc(passes.Neutral, func(n passes.Pass) bool { return n.Name == p.Name }) {
			names = append(names, p.Name)
		}
	}
	return names
}

// TestSchedulePassesDocumented checks that docs/cpu.md has a section for
// every schedule pass of the CPU table, in table order, under "Schedule
// passes", and that the CPU row of docs/architecture.md's target table
// links each of them in the same order: a pass added to the table without
// its documentation fails here.
func TestSchedulePassesDocumented(t *testing.T) {
	want := schedulePassNames()
	doc, err := os.ReadFile("../../docs/cpu.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sched, ok := strings.Cut(string(doc), "\n## Schedule passes\n")
	if !ok {
		t.Fatal(`docs/cpu.md has no "## Schedule passes" section`)
	}
	sched, _, _ = strings.Cut(sched, "\n## ")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^### `([a-z0-9-]+)`$").FindAllStringSubmatch(sched, -1) {
		got = append(got, m[1])
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/cpu.md's schedule pass sections are\n\t%v\nthe CPU table's schedule passes are\n\t%v", got, want)
	}

	arch, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(arch), "\n") {
		if strings.HasPrefix(line, "| `cpu` (`targets/cpu`) |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("docs/architecture.md's target table has no cpu row")
	}
	got = nil
	for _, m := range regexp.MustCompile("\\[`([a-z0-9-]+)`\\]\\(cpu\\.md#([a-z0-9-]+)\\)").FindAllStringSubmatch(row, -1) {
		if m[1] != m[2] {
			t.Errorf("docs/architecture.md links `%s` to cpu.md#%s", m[1], m[2])
		}
		got = append(got, m[1])
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/architecture.md's cpu row links the passes\n\t%v\nthe CPU table's schedule passes are\n\t%v", got, want)
	}
}
