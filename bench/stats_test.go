package main

import (
	"bytes"
	"encoding/xml"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestSpreadOf(t *testing.T) {
	tests := []struct {
		in            []float64
		min, med, max float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 1, 3, 5},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4},
		{[]float64{2, 2, 9, 1, 7}, 1, 2, 9},
	}
	for _, tt := range tests {
		s := spreadOf(tt.in)
		if s.Min != tt.min || s.Median != tt.med || s.Max != tt.max || s.N != len(tt.in) {
			t.Errorf("spreadOf(%v) = %+v; want %v %v %v", tt.in, s, tt.min, tt.med, tt.max)
		}
	}
	if s := spreadOf(nil); !math.IsNaN(s.Median) || s.format(rate) != "n/a" {
		t.Errorf("spreadOf(nil) = %+v", s)
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = float64(i + 1) // 1..1000
	}
	for _, tt := range []struct{ q, want float64 }{{50, 500}, {99, 990}, {99.9, 999}, {100, 1000}, {0.01, 1}} {
		if got := percentile(xs, tt.q); got != tt.want {
			t.Errorf("percentile(1..1000, %v) = %v; want %v", tt.q, got, tt.want)
		}
	}
}

// TestBarChart: the SVG parses as XML, has one bar per entry with its
// label, and bar heights are proportional to the values.
func TestBarChart(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 50 {
		var bars []bar
		for i := range 1 + r.IntN(5) {
			v := r.Float64() * math.Pow(10, float64(r.IntN(7)))
			bars = append(bars, bar{Label: "c<" + strconv.Itoa(i) + ">&", Value: v, Low: v * 0.9, Hi: v * 1.1, Sublabel: rate(v)})
		}
		svg := barChart("title & <x>", "unit", "note", bars)
		d := xml.NewDecoder(bytes.NewReader(svg))
		for {
			if _, err := d.Token(); err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("not XML: %v\n%s", err, svg)
				}
				break
			}
		}
		heights := regexp.MustCompile(`<rect x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)" fill="#4a7ab5">`).FindAllSubmatch(svg, -1)
		if len(heights) != len(bars) {
			t.Fatalf("%d bars drawn; want %d", len(heights), len(bars))
		}
		for i := range bars {
			if !strings.Contains(string(svg), "c&lt;"+strconv.Itoa(i)+"&gt;&amp;") {
				t.Fatalf("label %d missing", i)
			}
			h0, _ := strconv.ParseFloat(string(heights[0][1]), 64)
			hi, _ := strconv.ParseFloat(string(heights[i][1]), 64)
			want := bars[i].Value / bars[0].Value
			if h0 > 1 && hi > 1 && math.Abs(hi/h0-want) > 0.02*want+0.5/h0 {
				t.Fatalf("bar %d: height ratio %v; want %v", i, hi/h0, want)
			}
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {1.1, 2}, {2.2, 2.5}, {3, 5}, {7, 10}, {637000, 1e6}, {237000, 250000}} {
		if got := niceCeil(tt.in); got != tt.want {
			t.Errorf("niceCeil(%v) = %v; want %v", tt.in, got, tt.want)
		}
	}
}
