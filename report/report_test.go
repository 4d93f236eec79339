package report

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// testImage is a 64x64 picture: a gradient with a disc, shifted by k.
func testImage(k int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for y := range 64 {
		for x := range 64 {
			c := color.RGBA{uint8(4 * x), uint8(4 * y), uint8(128 + k), 255}
			if (x-32)*(x-32)+(y-32)*(y-32) < 200 {
				c.R, c.G = uint8(255-4*y), uint8(k*3)
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

// sampleReport has two prompts and three files, the last identical to the source.
func sampleReport() *Report {
	r := &Report{Title: "tiny ladder <&>", Source: "tiny-sd1.safetensors", SourceSize: 3 << 20, Settings: "2 steps, 64x64."}
	for i := range 2 {
		r.Prompts = append(r.Prompts, Prompt{Text: []string{"a cat", "a red <b>house</b>"}[i], Seed: uint64(i + 1), Image: testImage(0)})
	}
	for i, typ := range []string{"Q8_0", "Q4_K_M", "F16"} {
		f := File{Name: "tiny-" + typ + ".gguf", Type: typ, Size: int64(3-i) << 20, BitsPerWeight: float64(8 - 2*i)}
		for range r.Prompts {
			k := []int{2, 20, 0}[i]
			s := Shot{Image: testImage(k), PSNR: []float64{40, 25, math.Inf(1)}[i], SSIM: 0.9}
			f.Images = append(f.Images, s)
		}
		f.Blocks = []Bar{{"input_blocks.1", 0.01 * float64(i+1)}, {"middle_block", 0.02}, {"out", 0.005}}
		for j := range 20 {
			f.Tensors = append(f.Tensors, Bar{Name: "model.diffusion_model.input_blocks." + string(rune('a'+j)) + ".weight", Value: float64(j) / 100})
		}
		r.Files = append(r.Files, f)
	}
	return r
}

// The page holds no script, no external reference, every image as a PNG
// data: URI, one chart for the quality and two per file, escaped text.
func TestWriteSelfContained(t *testing.T) {
	var b bytes.Buffer
	r := sampleReport()
	if err := Write(&b, r); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, bad := range []string{"<script", "http://", "https://", "src=\"/", "url(", "ZgotmplZ", "<b>house"} {
		if bad == "http://" {
			// The SVG namespace is a name, not a reference.
			html := strings.ReplaceAll(html, `xmlns="http://www.w3.org/2000/svg"`, "")
			if strings.Contains(html, bad) {
				t.Errorf("page contains %q", bad)
			}
			continue
		}
		if strings.Contains(html, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	imgs := regexp.MustCompile(`<img [^>]*src="data:image/png;base64,`).FindAllString(html, -1)
	if want := len(r.Prompts) * (1 + 2*len(r.Files)); len(imgs) != want {
		t.Errorf("%d data: images, want %d", len(imgs), want)
	}
	if n := strings.Count(html, "<svg "); n != 1+2*len(r.Files) {
		t.Errorf("%d SVG charts, want %d", n, 1+2*len(r.Files))
	}
	if !strings.Contains(html, "identical") || !strings.Contains(html, "40.00 dB") {
		t.Error("PSNR figures missing")
	}
	if strings.Count(html, "…") == 0 || strings.Count(html, "input_blocks.a.weight") != 0 {
		t.Errorf("per-tensor bars: want the %d worst only, long names shortened", TopTensors)
	}
}

func TestDiffMap(t *testing.T) {
	a, b := testImage(0), testImage(0)
	d, err := DiffMap(a, b, 8)
	if err != nil {
		t.Fatal(err)
	}
	// No difference: the dimmed grey of the source, no red excess.
	c := d.RGBAAt(10, 10)
	if c.R != c.G || c.G < c.B {
		t.Errorf("identical images give %v at (10,10), want grey", c)
	}
	d, _ = DiffMap(a, testImage(30), 8)
	if c := d.RGBAAt(10, 10); c.R < 240 || c.B > 10 {
		t.Errorf("a difference of 30 levels times 8 gives %v, want red to yellow", c)
	}
	if _, err := DiffMap(a, image.NewRGBA(image.Rect(0, 0, 8, 8)), 8); err == nil {
		t.Error("images of other sizes compared")
	}
}

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

// TestRenderedInChromium opens a report in headless Chromium and checks,
// on the screenshot, that every image and chart drew something.
func TestRenderedInChromium(t *testing.T) {
	browser := Chromium()
	if browser == "" {
		t.Skip("no chromium (apt-get install chromium)")
	}
	if testing.Short() {
		t.Skip("starts a browser")
	}
	var b bytes.Buffer
	r := sampleReport()
	if err := Write(&b, r); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	if d := os.Getenv("SDTOOL_REPORT_SHOT_DIR"); d != "" {
		shot = filepath.Join(d, "shot.png")
	}
	boxes := Screenshot(t, browser, b.Bytes(), shot)
	if want := len(r.Prompts)*(1+2*len(r.Files)) + 1 + 2*len(r.Files); len(boxes) != want {
		t.Errorf("%d framed regions on the screenshot, want %d (every image and chart)", len(boxes), want)
	}
}

// marker frames every image and chart in a colour the report never uses,
// apart from its neighbours, so that the screenshot shows where each is.
const marker = `<style>img.shot, div.chart > svg { outline: 2px solid #ff00ff; outline-offset: 1px; margin: 12px; }</style>`

// Screenshot renders page in browser with the marker frames, writes the
// screenshot to shot, and returns the frames it found, failing the test
// for any whose inside is blank (a single colour).
func Screenshot(t *testing.T, browser string, page []byte, shot string) []image.Rectangle {
	t.Helper()
	dir := filepath.Dir(shot)
	html := filepath.Join(dir, "marked.html")
	marked := bytes.Replace(page, []byte("</head>"), []byte(marker+"</head>"), 1)
	if err := os.WriteFile(html, marked, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--force-device-scale-factor=1", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1400,4200", "--screenshot="+shot, "file://"+html)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	boxes := frames(img)
	for _, r := range boxes {
		in := r.Inset(4)
		if in.Empty() {
			t.Errorf("frame %v is too small", r)
			continue
		}
		if uniform(img, in) {
			t.Errorf("the region %v is blank", r)
		}
	}
	return boxes
}

// isMarker reports the marker colour.
func isMarker(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r>>8 > 240 && g>>8 < 16 && b>>8 > 240
}

// frames returns the bounding boxes of the connected marker-coloured regions.
func frames(img image.Image) []image.Rectangle {
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
