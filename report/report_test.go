package report

import (
	"bytes"
	"image"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sdtool/sdtool/report/reporttest"
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

// A file that could not be rendered keeps its row, marked failed with its
// error, and adds no image, no chart point and no error cards; the other
// files are reported in full.
func TestWriteFailedFile(t *testing.T) {
	r := sampleReport()
	r.Files = append(r.Files[:1], File{Name: "tiny-int8_convrot.safetensors", Type: "int8_convrot", Size: 2 << 20,
		Error: "invalid <unigram> tokenizer"}, r.Files[1])
	var b bytes.Buffer
	if err := Write(&b, r); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	row := regexp.MustCompile(`<tr class="failed"><td>tiny-int8_convrot.safetensors</td><td>int8_convrot</td><td>2.00 MiB</td><td></td><td colspan="2">failed: invalid &lt;unigram&gt; tokenizer</td></tr>`)
	if !row.MatchString(html) {
		t.Errorf("no failed row for the broken file in:\n%s", html[:min(len(html), 3000)])
	}
	good := len(r.Files) - 1
	if n := len(regexp.MustCompile(`<img [^>]*src="data:image/png;base64,`).FindAllString(html, -1)); n != len(r.Prompts)*(1+2*good) {
		t.Errorf("%d images, want %d (none for the failed file)", n, len(r.Prompts)*(1+2*good))
	}
	if n := strings.Count(html, "<svg "); n != 1+2*good {
		t.Errorf("%d SVG charts, want %d", n, 1+2*good)
	}
	if n := strings.Count(html, "<circle"); n != good {
		t.Errorf("%d points on the chart, want %d", n, good)
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

// TestRenderedInChromium opens a report in headless Chromium and checks,
// on the screenshot, that every image and chart drew something.
func TestRenderedInChromium(t *testing.T) {
	browser := reporttest.Chromium()
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
	frames, blank, err := reporttest.Screenshot(browser, b.Bytes(), shot)
	if err != nil {
		t.Fatal(err)
	}
	if want := reporttest.Expected(len(r.Prompts), len(r.Files)); len(frames) != want {
		t.Errorf("%d framed regions on the screenshot, want %d (every image and chart)", len(frames), want)
	}
	for _, b := range blank {
		t.Errorf("the region %v is blank", b)
	}
}

// TestWriteHostileText: names and prompts with control characters,
// invalid UTF-8 and long multi-byte labels give a page that is valid UTF-8
// with no raw control character, and labels are cut by characters (issue
// 35, item 9).
func TestWriteHostileText(t *testing.T) {
	r := sampleReport()
	r.Title = "bell\x07 and \xff"
	r.Prompts[0].Text = "a\x1b[31m red cat"
	r.Files[0].Name = "tiny\x00.gguf"
	r.Files[0].Type = "Q8\x0c_0"
	r.Files[0].Tensors[0] = Bar{Name: strings.Repeat("é", 40) + ".weight", Value: 1}
	r.Files[0].Blocks[0].Name = "blk\x01\xfe"
	var b bytes.Buffer
	if err := Write(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.Bytes()
	if !utf8.Valid(page) {
		t.Error("the page is not valid UTF-8")
	}
	for i, c := range page {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			t.Fatalf("raw control character %#x at byte %d: %q", c, i, page[max(0, i-40):min(len(page), i+40)])
		}
	}
	if !bytes.Contains(page, []byte("…"+strings.Repeat("é", 20))) {
		t.Error("the long label is not cut to its last characters")
	}
}
