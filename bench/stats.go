package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// spread is the minimum, median and maximum of a set of measurements.
type spread struct {
	Min, Median, Max float64
	N                int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{Min: math.NaN(), Median: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Min: s[0], Median: med, Max: s[len(s)-1], N: len(s)}
}

// percentile is the nearest-rank percentile q (0 < q <= 100) of sorted xs.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(q*float64(len(sorted))/100 - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// format renders a spread as "median (min–max)" with f for each value.
func (s spread) format(f func(float64) string) string {
	if s.N == 0 {
		return "n/a"
	}
	if s.N == 1 {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func rate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return time.Duration(v * float64(time.Second)).Round(time.Millisecond).String()
}

func ms(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f ms", v)
}

func micros(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f µs", v)
}

func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v)
}

func mib(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", v)
}
