package report

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Colours of the charts.
const (
	axisColour  = "#888"
	pointColour = "#1f6fb4"
	barColour   = "#d9822b"
)

// chart draws the files' mean PSNR against their size as an SVG scatter
// plot; identical images (infinite PSNR) are drawn at the top edge, failed
// files not at all.
func chart(files []File) template.HTML {
	const w, h, left, right, top, bottom = 560, 300, 56, 100, 16, 44
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="PSNR against file size">`, w, h, w, h)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#fafafa"/>`, w, h)
	files = slices.DeleteFunc(slices.Clone(files), func(f File) bool { return f.Failed() })
	if len(files) == 0 {
		b.WriteString(`</svg>`)
		return template.HTML(b.String())
	}
	minS, maxS := math.Inf(1), math.Inf(-1)
	minQ, maxQ := math.Inf(1), math.Inf(-1)
	for i := range files {
		s := float64(files[i].Size) / (1 << 20)
		minS, maxS = min(minS, s), max(maxS, s)
		if q := files[i].PSNR(); !math.IsInf(q, 0) && !math.IsNaN(q) {
			minQ, maxQ = min(minQ, q), max(maxQ, q)
		}
	}
	if math.IsInf(minQ, 1) {
		minQ, maxQ = 0, 60
	}
	lo, hi := niceRange(minS, maxS)
	qlo, qhi := niceRange(minQ, maxQ)
	px := func(s float64) float64 { return left + (s-lo)/(hi-lo)*(w-left-right) }
	py := func(q float64) float64 { return h - bottom - (q-qlo)/(qhi-qlo)*(h-top-bottom) }
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`, left, h-bottom, w-right, h-bottom, axisColour)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`, left, top, left, h-bottom, axisColour)
	for i := 0; i <= 4; i++ {
		s := lo + (hi-lo)*float64(i)/4
		q := qlo + (qhi-qlo)*float64(i)/4
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle" fill="#444">%.2f</text>`, px(s), h-bottom+16, s)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="#444">%.1f</text>`, left-6, py(q)+4, q)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`, left+1, py(q), w-right, py(q))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" text-anchor="middle" fill="#222">file size (MiB)</text>`, (left+w-right)/2, h-8)
	fmt.Fprintf(&b, `<text x="14" y="%d" font-size="12" text-anchor="middle" fill="#222" transform="rotate(-90 14 %d)">mean PSNR (dB)</text>`, (top+h-bottom)/2, (top+h-bottom)/2)
	var labels [][2]float64
	for i := range files {
		q := files[i].PSNR()
		y := py(q)
		if math.IsInf(q, 1) || math.IsNaN(q) {
			y = top
		}
		x := px(float64(files[i].Size) / (1 << 20))
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s"/>`, x, y, pointColour)
		// Files of nearly one size and quality would print their names
		// over each other: move a label down until it is clear.
		ly := y + 4
		for clash := true; clash; {
			clash = false
			for _, l := range labels {
				if math.Abs(l[0]-x) < 70 && math.Abs(l[1]-ly) < 12 {
					ly, clash = l[1]+12, true
				}
			}
		}
		labels = append(labels, [2]float64{x, ly})
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#222">%s</text>`, x+8, ly, template.HTMLEscapeString(clean(files[i].Type)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// niceRange widens [lo, hi] a little so that points sit inside the axes.
func niceRange(lo, hi float64) (float64, float64) {
	if hi-lo < 1e-9 {
		return lo - 1, hi + 1
	}
	pad := (hi - lo) * 0.08
	return lo - pad, hi + pad
}

// bars draws labelled horizontal bars on a scale whose full width is
// scale (the largest value of every file, so that files compare); a
// scale of 0 means the largest of bs.
func bars(title string, bs []Bar, scale float64) template.HTML {
	const w, label, row, top = 440, 170, 14, 20
	h := top + row*max(1, len(bs)) + 6
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, w, h, w, h, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#fafafa"/>`, w, h)
	fmt.Fprintf(&b, `<text x="4" y="13" font-size="11" fill="#222">%s</text>`, template.HTMLEscapeString(title))
	if len(bs) == 0 {
		fmt.Fprintf(&b, `<text x="4" y="%d" font-size="11" fill="#888">(none measured)</text>`, top+11)
	}
	top1 := scale
	if top1 <= 0 {
		top1 = largest(bs)
	}
	for i, x := range bs {
		y := top + i*row
		name := lastRunes(clean(x.Name), 28)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" text-anchor="end" fill="#333">%s</text>`, label-4, y+10, template.HTMLEscapeString(name))
		frac := 0.0
		if top1 > 0 && !math.IsNaN(x.Value) {
			frac = min(1, x.Value/top1)
		}
		bw := frac * (w - label - 60)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, label, y+2, max(bw, 1), row-4, barColour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#333">%.3g</text>`, float64(label)+max(bw, 1)+4, y+10, x.Value)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// lastRunes returns s, or "…" and its last n-1 characters when it is
// longer than n characters: a label cut by bytes could split a character
// and make the page invalid UTF-8.
func lastRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return "…" + string(r[len(r)-(n-1):])
}

// clean returns s as valid UTF-8 without control characters, each bad byte
// or control character shown as U+FFFD: names and prompts come from files
// and command lines, and raw control characters make the page's SVG (XML)
// invalid.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\t' && r != '\n' {
			return '\uFFFD'
		}
		return r
	}, s)
}

// largest returns the largest finite value of bs, 0 for none.
func largest(bs []Bar) float64 {
	var m float64
	for _, x := range bs {
		if !math.IsNaN(x.Value) && !math.IsInf(x.Value, 0) {
			m = max(m, x.Value)
		}
	}
	return m
}
