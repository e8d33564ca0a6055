package conformance

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/attnc/attnc/frontend"
	"github.com/attnc/attnc/targets/cpu"
)

// TestCPULevelsBuild builds bf16Levels restricted to x86-64 and
// x86-64-v4-bf16 (Options.CPULevels, attnc build --cpu-levels): the bf16
// prefill kernel is cloned at those two, every other work kernel at x86-64
// and x86-64-v4 (the best level below x86-64-v4-bf16 it can be cloned
// at), and nothing at x86-64-v3. The library matches the reference at the
// level this machine picks, and forced with $ATTNC_CPU_LEVEL to the levels
// below: x86-64-v4 (prefill runs its x86-64 clone), x86-64-v3 (not built:
// the best level below, x86-64, runs) and x86-64. Built restricted to
// x86-64-v4-bf16 alone, a level below it is refused.
func TestCPULevelsBuild(t *testing.T) {
	t.Parallel()
	needTools(t)
	vs, err := frontend.Parse("level.attn", []byte(bf16Levels))
	if err != nil {
		t.Fatal(err)
	}
	v := vs[0]
	s, err := BuildWith(v, t.TempDir(), Options{CPULevels: []string{"x86-64-v4-bf16", "x86-64"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Lib.Close()
	// clones: the levels of each work kernel's clones (its name without
	// the level's suffix).
	clones := map[string][]string{}
	bf16 := 0
	for _, k := range s.Final.Kernels {
		if k.Level != "" {
			base := strings.TrimSuffix(k.Name, "_"+strings.ReplaceAll(k.Level, "-", "_"))
			clones[base] = append(clones[base], k.Level)
		}
	}
	for base, levels := range clones {
		want := []string{"x86-64", "x86-64-v4"}
		if slices.Contains(levels, "x86-64-v4-bf16") {
			want = []string{"x86-64", "x86-64-v4-bf16"}
			bf16++
		}
		if !slices.Equal(levels, want) {
			t.Errorf("%s clones at %v, want %v", base, levels, want)
		}
	}
	if bf16 == 0 || len(clones) == bf16 {
		t.Errorf("clones %v: want x86-64-v4-bf16 clones of some kernels (prefill) and x86-64-v4 clones of the others", clones)
	}
	names, err := s.Levels()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.RunAttentionAll(2, 7) {
		if !r.Pass {
			t.Errorf("%s: %s", s.Level, r)
		}
	}
	for _, level := range names[:slices.Index(names, s.Level)] {
		want := level
		if level == "x86-64-v3" {
			want = "x86-64" // not built: the best level below runs
		}
		ls, err := s.atLevelReporting(level)
		if err != nil {
			t.Fatal(err)
		}
		if ls.Level != want {
			t.Errorf("ATTNC_CPU_LEVEL=%s: the library runs %q, want %s", level, ls.Level, want)
		}
		for _, r := range ls.RunAttentionAll(2, 7) {
			if !r.Pass {
				t.Errorf("level %s: %s", level, r)
			}
		}
		ls.Lib.Close()
	}

	if s.Level != "x86-64-v4-bf16" || os.Getenv(cpu.LevelEnv) != "" {
		t.Skipf("this machine runs %s: a library of x86-64-v4-bf16 alone would be refused", s.Level)
	}
	one, err := BuildWith(v, t.TempDir(), Options{CPULevels: []string{"x86-64-v4-bf16"}})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Lib.Close()
	if one.Level != "x86-64-v4-bf16" {
		t.Errorf("x86-64-v4-bf16 alone runs %q here", one.Level)
	}
	checkRefused(t, one, "x86-64-v4")
}

// atLevelReporting is AtLevel for a level the library may map to another
// (one it has no clone for runs the best level below): the copy's Level is
// the one it reports, "" when it refuses.
func (s *Suite) atLevelReporting(level string) (*Suite, error) {
	data, err := os.ReadFile(s.so)
	if err != nil {
		return nil, err
	}
	cp := s.so[:len(s.so)-len(".so")] + ".as-" + level + ".so"
	if err := os.WriteFile(cp, data, 0o755); err != nil {
		return nil, err
	}
	lib, got, err := openLevel(cp, s.rt, level, true)
	if err != nil {
		return nil, err
	}
	if refused(got) {
		got = ""
	}
	c := *s
	c.Lib, c.Level, c.so = lib, got, cp
	return &c, nil
}

// refused reports whether a level a library reports (cpurt.Lib.CallStr of
// <prefix>_cpu_level) is NULL: it refused the level.
func refused(level string) bool { return level == "" || strings.HasSuffix(level, "returned NULL>") }
