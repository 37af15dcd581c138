package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strings"
)

// bar is one bar of a chart: a value with an optional min–max whisker.
type bar struct {
	Label    string
	Value    float64
	Low, Hi  float64 // whisker; ignored when both are 0
	Sublabel string  // printed above the bar, e.g. the value
}

// Chart geometry: every text line must fit the width (textWidth).
const (
	chartW, chartH                               = 640, 360
	chartLeft, chartRight, chartTop, chartBottom = 70, 20, 40, 60
	titleSize, noteSize                          = 15, 11
	titleMaxWidth                                = chartW - chartLeft - chartRight
	noteMaxWidth                                 = chartW - 2*noteX
	noteX                                        = 10
)

// barChart draws a vertical bar chart as a standalone SVG document: title,
// y axis from 0 with 5 gridlines, one bar per entry, whiskers for min–max,
// and at the bottom the note (the run's date, commit and rounds). Non-finite
// or negative values are drawn as empty bars. A title or note wider than
// the chart is set in a smaller font until it fits (see textWidth).
func barChart(title, unit, note string, bars []bar) []byte {
	const (
		w, h                     = chartW, chartH
		left, right, top, bottom = chartLeft, chartRight, chartTop, chartBottom
	)
	plotW, plotH := float64(w-left-right), float64(h-top-bottom)
	top_ := 0.0
	for _, b := range bars {
		for _, v := range []float64{b.Value, b.Hi} {
			if finite(v) && v > top_ {
				top_ = v
			}
		}
	}
	scaleMax := niceCeil(top_)
	y := func(v float64) float64 {
		if !finite(v) || v < 0 {
			v = 0
		}
		return float64(top) + plotH*(1-v/scaleMax)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&buf, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&buf, `<text x="%d" y="22" font-size="%.1f" font-weight="bold">%s</text>`+"\n", left, fitSize(title, titleSize, titleMaxWidth, true), html.EscapeString(title))
	fmt.Fprintf(&buf, `<text x="%d" y="%d" font-size="%.1f" fill="#555">%s</text>`+"\n", noteX, h-8, fitSize(note, noteSize, noteMaxWidth, false), html.EscapeString(note))
	for i := 0; i <= 5; i++ {
		v := scaleMax * float64(i) / 5
		yy := y(v)
		fmt.Fprintf(&buf, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, w-right, yy)
		fmt.Fprintf(&buf, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, yy+4, html.EscapeString(axisLabel(v)))
	}
	fmt.Fprintf(&buf, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">%s</text>`+"\n", float64(top)+plotH/2, float64(top)+plotH/2, html.EscapeString(unit))
	n := max(len(bars), 1)
	slot := plotW / float64(n)
	bw := slot * 0.6
	for i, b := range bars {
		x := float64(left) + slot*float64(i) + (slot-bw)/2
		yy := y(b.Value)
		fmt.Fprintf(&buf, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7ab5"><title>%s: %s</title></rect>`+"\n",
			x, yy, bw, float64(top)+plotH-yy, html.EscapeString(b.Label), html.EscapeString(b.Sublabel))
		if b.Low != 0 || b.Hi != 0 {
			cx := x + bw/2
			fmt.Fprintf(&buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx, y(b.Low), cx, y(b.Hi))
			fmt.Fprintf(&buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx-6, y(b.Hi), cx+6, y(b.Hi))
			fmt.Fprintf(&buf, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx-6, y(b.Low), cx+6, y(b.Low))
		}
		fmt.Fprintf(&buf, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x+bw/2, math.Min(yy, y(b.Hi))-5, html.EscapeString(b.Sublabel))
		fmt.Fprintf(&buf, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x+bw/2, h-bottom+18, html.EscapeString(b.Label))
	}
	fmt.Fprintf(&buf, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, h-bottom, w-right, h-bottom)
	buf.WriteString("</svg>\n")
	return buf.Bytes()
}

// textWidth estimates the width in px of s in a sans-serif font of size
// px, from Helvetica's advance widths by character class (an
// over-estimate for most text, so what it says fits does).
func textWidth(s string, size float64, bold bool) float64 {
	em := 0.0
	for _, r := range s {
		switch {
		case strings.ContainsRune("ijlI.,:;'|!", r):
			em += 0.28
		case strings.ContainsRune(" ()[]ft-/", r):
			em += 0.36
		case strings.ContainsRune("mwMW–—%@", r):
			em += 0.92
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9' && bold:
			em += 0.72
		default:
			em += 0.58
		}
	}
	if bold {
		em *= 1.07
	}
	return em * size
}

// fitSize is size, or the size below it at which s fits maxWidth.
func fitSize(s string, size, maxWidth float64, bold bool) float64 {
	if w := textWidth(s, size, bold); w > maxWidth {
		return math.Floor(size*maxWidth/w*10) / 10
	}
	return size
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if !finite(v) || v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-12) {
			return m * p
		}
	}
	return 10 * p
}

func axisLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}
