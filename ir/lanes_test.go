package ir

import (
	"fmt"
	"strings"
	"testing"
)

// warpSumSrc sums x over each warp of a 128-thread block with butterfly
// shuffles (masks LANES/2 .. 1) and a lanes loop per warp over a spread:
// warp w stores its sum at s[w], lane by lane at every lane.
func warpSumSrc(lanes int) string {
	head := "module w prefix w"
	if lanes != DefaultLanes {
		head += fmt.Sprintf(" lanes %d", lanes)
	}
	var shfl strings.Builder
	for s := lanes / 2; s >= 1; s /= 2 {
		fmt.Fprintf(&shfl, "        v = (v + shfl_xor(v, %d))\n", s)
	}
	return fmt.Sprintf(`%s

kernel w_sum role decode (x: f32* [128], s: f32* [4] out, l: f32* [128] out) {
  for item in 0 .. 1 parallel @work {
    for w in 0 .. %d spread {
      for lane in 0 .. %d lanes {
        var v = x[((w * %d) + lane)]
%s        store l[((w * %d) + lane)] = v
        if (lane == 0) {
          store s[w] = v
        }
      }
    }
  }
  return 0
}
`, head, 128/lanes, lanes, lanes, shfl.String(), lanes)
}

// TestLaneWidth runs the same warp reduction at 32 and 64 lanes: each
// warp's sum (computed here from the inputs) reaches every lane of the
// warp, and the text form says the width ("lanes 64") and reads back.
func TestLaneWidth(t *testing.T) {
	x := make([]float32, 128)
	for i := range x {
		x[i] = float32(i%7) + 0.25*float32(i%3)
	}
	for _, lanes := range []int{32, 64} {
		src := warpSumSrc(lanes)
		m, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(m); err != nil {
			t.Fatalf("%d lanes: %v", lanes, err)
		}
		if m.LaneWidth() != lanes || m.String() != src {
			t.Fatalf("%d lanes: lane width %d, text:\n%s", lanes, m.LaneWidth(), m)
		}
		s, l := make([]float32, 4), make([]float32, 128)
		if _, err := Run(m, "w_sum", map[string]any{"x": x, "s": s, "l": l}); err != nil {
			t.Fatalf("%d lanes: %v", lanes, err)
		}
		for w := 0; w < 128/lanes; w++ {
			want := float32(0)
			for i := w * lanes; i < (w+1)*lanes; i++ {
				want += x[i]
			}
			if s[w] != want {
				t.Errorf("%d lanes: warp %d sums to %g, want %g", lanes, w, s[w], want)
			}
			for i := w * lanes; i < (w+1)*lanes; i++ {
				if l[i] != want {
					t.Errorf("%d lanes: lane %d holds %g, want the warp's sum %g", lanes, i, l[i], want)
					break
				}
			}
		}
	}
}

// TestLaneWidthErrors checks the verifier and the interpreter against the
// module's lane width.
func TestLaneWidthErrors(t *testing.T) {
	wide := warpSumSrc(64)
	for _, c := range []struct{ src, want string }{
		// A 64-lane kernel in a module of 32-lane warps.
		{strings.Replace(wide, " lanes 64", "", 1), "must run to 32"},
		{strings.Replace(wide, " lanes 64", " lanes 48", 1), "lanes 48, want a power of two"},
		{strings.Replace(wide, " lanes 64", " lanes 128", 1), "lanes 128, want a power of two"},
		// mma's fragments are laid out over 32 lanes.
		{strings.Replace(gpuSrc, "module g prefix g", "module g prefix g lanes 64", 1), "ldmatrix: its fragments are laid out over 32 lanes"},
	} {
		m, err := Parse(c.src)
		if err == nil {
			err = Verify(m)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	// Run checks the module's width: a 64-lane schedule read as 32 lanes
	// does not run.
	m, err := Parse(wide)
	if err != nil {
		t.Fatal(err)
	}
	m.SetLaneWidth(32)
	_, err = Run(m, "w_sum", map[string]any{"x": make([]float32, 128), "s": make([]float32, 4), "l": make([]float32, 128)})
	if err == nil || !strings.Contains(err.Error(), "must run to 32") {
		t.Errorf("a 64-lane shuffle at 32 lanes: %v", err)
	}
}
