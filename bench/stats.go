package bench

import (
	"encoding/json"
	"errors"
	"math"
	"sort"
	"time"
)

// Stats summarizes repeated measurements of one quantity.
type Stats struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P25    float64 `json:"p25"`
	P75    float64 `json:"p75"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// summarize returns the median, quartiles (linear interpolation between
// order statistics) and extremes of xs.
func summarize(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	q := func(p float64) float64 {
		x := p * float64(len(s)-1)
		i := int(math.Floor(x))
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (x-float64(i))*(s[i+1]-s[i])
	}
	return Stats{N: len(s), Median: q(0.5), P25: q(0.25), P75: q(0.75), Min: s[0], Max: s[len(s)-1]}
}

// Measure is a quantity of work done once per repetition and the wall time
// of each repetition.
type Measure struct {
	Amount  float64   `json:"amount"`  // work per repetition: bytes, flops or cycles
	Seconds []float64 `json:"seconds"` // each repetition's wall time
}

// Rate summarizes Amount per second over the repetitions, in units of 1e9
// (GB/s, GFLOP/s, GHz).
func (m Measure) Rate() Stats {
	r := make([]float64, 0, len(m.Seconds))
	for _, s := range m.Seconds {
		if s > 0 {
			r = append(r, m.Amount/s/1e9)
		}
	}
	return summarize(r)
}

// MarshalJSON writes the amount, every repetition's seconds and the rate's
// summary.
func (m Measure) MarshalJSON() ([]byte, error) {
	type plain Measure
	return json.Marshal(struct {
		plain
		Rate Stats `json:"rate"`
	}{plain(m), m.Rate()})
}

// Time summarizes the repetitions' wall times in seconds.
func (m Measure) Time() Stats { return summarize(m.Seconds) }

// TimeMS is Time in milliseconds.
func (m Measure) TimeMS() Stats {
	t := m.Time()
	return Stats{N: t.N, Median: 1e3 * t.Median, P25: 1e3 * t.P25, P75: 1e3 * t.P75, Min: 1e3 * t.Min, Max: 1e3 * t.Max}
}

// Budget is how many repetitions a measurement runs: exactly Reps when
// Reps > 0, else repetitions until Seconds of them have run (at least
// MinReps and at most MaxReps).
type Budget struct {
	Reps    int
	Seconds float64
}

const (
	// MinReps is the fewest repetitions a time budget runs: enough for a
	// median and quartiles.
	MinReps = 5
	// MaxReps bounds the repetitions of a time budget (and of --reps).
	MaxReps = 100000
)

// repeat calls rep until the budget is spent and returns the seconds each
// call reported.
func (b Budget) repeat(rep func(i int) (float64, error)) ([]float64, error) {
	if b.Reps < 0 || b.Reps > MaxReps || b.Seconds < 0 || math.IsNaN(b.Seconds) {
		return nil, errors.New("bench: bad budget")
	}
	var secs []float64
	total := 0.0
	start := time.Now()
	for i := 0; ; i++ {
		if b.Reps > 0 {
			if i == b.Reps {
				break
			}
		} else if i >= MaxReps || (i >= MinReps && (total >= b.Seconds || time.Since(start).Seconds() >= 3*b.Seconds+1)) {
			break
		}
		s, err := rep(i)
		if err != nil {
			return secs, err
		}
		secs = append(secs, s)
		total += s
	}
	return secs, nil
}

// timed returns f's wall time.
func timed(f func() error) (float64, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0).Seconds(), err
}
