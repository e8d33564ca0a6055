package bench

import (
	"encoding/json"
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want Stats
	}{
		{nil, Stats{}},
		{[]float64{7}, Stats{N: 1, Median: 7, P25: 7, P75: 7, Min: 7, Max: 7}},
		{[]float64{5, 1, 4, 2, 3}, Stats{N: 5, Median: 3, P25: 2, P75: 4, Min: 1, Max: 5}},
		// Even count: the median is the mean of the middle two; quartiles
		// interpolate at (n-1)/4 and 3(n-1)/4.
		{[]float64{4, 1, 3, 2}, Stats{N: 4, Median: 2.5, P25: 1.75, P75: 3.25, Min: 1, Max: 4}},
	} {
		if got := summarize(tc.xs); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.xs, got, tc.want)
		}
	}
	in := []float64{3, 1, 2}
	summarize(in)
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("summarize sorted its input: %v", in)
	}
}

func TestMeasureRate(t *testing.T) {
	m := Measure{Amount: 2e9, Seconds: []float64{1, 2, 0.5}}
	if r := m.Rate(); r.N != 3 || r.Median != 2 || r.Min != 1 || r.Max != 4 {
		t.Errorf("Rate = %+v", r)
	}
	if ti := m.Time(); ti.Median != 1 || ti.Max != 2 {
		t.Errorf("Time = %+v", ti)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Amount  float64
		Seconds []float64
		Rate    Stats
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Amount != 2e9 || len(back.Seconds) != 3 || back.Rate.Median != 2 {
		t.Errorf("JSON %s: %+v %v", b, back, err)
	}
}

func TestBudget(t *testing.T) {
	count := func(b Budget, sec float64) int {
		n := 0
		secs, err := b.repeat(func(i int) (float64, error) {
			if i != n {
				t.Errorf("repetition %d called as %d", n, i)
			}
			n++
			return sec, nil
		})
		if err != nil || len(secs) != n {
			t.Fatalf("repeat: %v (%d seconds for %d calls)", err, len(secs), n)
		}
		return n
	}
	for _, tc := range []struct {
		b    Budget
		sec  float64
		want int
	}{
		{Budget{Reps: 3, Seconds: 100}, 1, 3},  // exact repetitions
		{Budget{Seconds: 1}, 0.125, 8},         // until a second has been timed
		{Budget{Seconds: 1}, 0.3, MinReps},     // at least MinReps
		{Budget{Seconds: 0}, 0, MinReps},       // nothing to wait for
		{Budget{Seconds: 1e-9}, 1e-3, MinReps}, // a tiny budget still gives quartiles
	} {
		if got := count(tc.b, tc.sec); got != tc.want {
			t.Errorf("%+v with %g s per call: %d repetitions, want %d", tc.b, tc.sec, got, tc.want)
		}
	}
	for _, b := range []Budget{{Reps: -1}, {Reps: MaxReps + 1}, {Seconds: -1}, {Seconds: math.NaN()}} {
		if _, err := b.repeat(func(int) (float64, error) { return 0, nil }); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
}
