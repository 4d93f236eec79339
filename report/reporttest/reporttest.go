// Package reporttest checks a rendered report in a headless Chromium: it
// frames every image and chart in a marker colour, takes a screenshot and
// finds the frames, so that a test can count them and see that none is
// blank. It is for tests; nothing in sdtool's commands imports it.
package reporttest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Chromium finds a headless browser: $SDTOOL_CHROMIUM, or Debian's
// chromium on PATH; "" when there is none.
func Chromium() string {
	if p := os.Getenv("SDTOOL_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// marker frames every image and chart in a colour the report never uses,
// apart from its neighbours, so that the screenshot shows where each is.
const marker = `<style>img.shot, div.chart > svg { outline: 2px solid #ff00ff; outline-offset: 1px; margin: 12px; }</style>`

// Screenshot renders page in browser with the marker frames, writes the
// screenshot to shot (its folder also gets the marked page and a browser
// profile), and returns the frames it found and those whose inside is
// blank (nearly one colour).
func Screenshot(browser string, page []byte, shot string) (frames, blank []image.Rectangle, err error) {
	dir := filepath.Dir(shot)
	html := filepath.Join(dir, "marked.html")
	marked := bytes.Replace(page, []byte("</head>"), []byte(marker+"</head>"), 1)
	if err := os.WriteFile(html, marked, 0o644); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--force-device-scale-factor=1", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1400,4200", "--screenshot="+shot, "file://"+html)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("%s: %v\n%s", browser, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", shot, err)
	}
	frames = findFrames(img)
	for _, r := range frames {
		if in := r.Inset(4); in.Empty() || uniform(img, in) {
			blank = append(blank, r)
		}
	}
	return frames, blank, nil
}

// isMarker reports the marker colour.
func isMarker(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r>>8 > 240 && g>>8 < 16 && b>>8 > 240
}

// findFrames returns the bounding boxes of the connected marker-coloured regions.
func findFrames(img image.Image) []image.Rectangle {
	bd := img.Bounds()
	seen := make([]bool, bd.Dx()*bd.Dy())
	var out []image.Rectangle
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			i := (y-bd.Min.Y)*bd.Dx() + x - bd.Min.X
			if seen[i] || !isMarker(img.At(x, y)) {
				continue
			}
			box := image.Rect(x, y, x+1, y+1)
			stack := []image.Point{{x, y}}
			seen[i] = true
			for len(stack) > 0 {
				p := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				box = box.Union(image.Rect(p.X, p.Y, p.X+1, p.Y+1))
				for _, d := range []image.Point{{1, 0}, {-1, 0}, {0, 1}, {0, -1}} {
					q := p.Add(d)
					if !q.In(bd) {
						continue
					}
					j := (q.Y-bd.Min.Y)*bd.Dx() + q.X - bd.Min.X
					if !seen[j] && isMarker(img.At(q.X, q.Y)) {
						seen[j] = true
						stack = append(stack, q)
					}
				}
			}
			if box.Dx() >= 16 && box.Dy() >= 16 {
				out = append(out, box)
			}
		}
	}
	return out
}

// uniform reports whether every pixel of r has nearly one colour.
func uniform(img image.Image, r image.Rectangle) bool {
	r0, g0, b0, _ := img.At(r.Min.X, r.Min.Y).RGBA()
	differ := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			r1, g1, b1, _ := img.At(x, y).RGBA()
			if absDiff(uint8(r0>>8), uint8(r1>>8))+absDiff(uint8(g0>>8), uint8(g1>>8))+absDiff(uint8(b0>>8), uint8(b1>>8)) > 24 {
				differ++
			}
		}
	}
	return differ < r.Dx()*r.Dy()/100
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// Expected returns how many frames a report of prompts and files shows:
// the source's image per prompt, each file's image and difference map per
// prompt, the quality chart, and each file's two bar charts.
func Expected(prompts, files int) int { return prompts*(1+2*files) + 1 + 2*files }
