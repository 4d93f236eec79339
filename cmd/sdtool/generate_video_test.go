//go:build cgo

package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"html"
	"image"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/quant/imatrix"
)

const (
	tinyWan     = "../../testdata/tiny-wan.gguf"
	tinyWanTI2V = "../../testdata/tiny-wan-ti2v.gguf"
)

// aviFrames returns the JPEG frames of an AVI's movi list, read without
// the writer's code: the 00dc chunks in order.
func aviFrames(t *testing.T, b []byte) [][]byte {
	t.Helper()
	i := bytes.Index(b, []byte("movi"))
	if string(b[:4]) != "RIFF" || string(b[8:12]) != "AVI " || i < 0 {
		t.Fatalf("not an AVI with a movi list")
	}
	n := int(binary.LittleEndian.Uint32(b[i-4:])) - 4
	var out [][]byte
	for p := i + 4; p < i+4+n; {
		size := int(binary.LittleEndian.Uint32(b[p+4:]))
		if string(b[p:p+4]) == "00dc" {
			out = append(out, b[p+8:p+8+size])
		}
		p += 8 + size + size%2
	}
	return out
}

func TestGenerateVideo(t *testing.T) {
	dir := t.TempDir()
	clip := filepath.Join(dir, "cat.avi")
	code, _, errOut := runApp(t, "generate", "-m", tinyWan, "-M", "vid_gen", "--video-frames", "6", "-p", "a cat", "--steps", "1",
		"-W", "16", "-H", "16", "-t", "1", "-o", clip)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "aligning the video from 6 to 5 frames") {
		t.Errorf("no alignment warning: %s", errOut)
	}
	b, err := os.ReadFile(clip)
	if err != nil {
		t.Fatal(err)
	}
	jpegs := aviFrames(t, b)
	if len(jpegs) != 5 {
		t.Fatalf("%d frames in the AVI, want 5", len(jpegs))
	}
	// The same video as PNG frames: five files, each closest to its own AVI frame (JPEG is lossy).
	// It collects an importance matrix of the DiT's and UMT5's linear weights.
	dat := filepath.Join(dir, "wan.dat")
	code, _, errOut = runApp(t, "generate", "-m", tinyWan, "-M", "vid_gen", "--video-frames", "5", "-p", "a cat", "--steps", "1",
		"-W", "16", "-H", "16", "-t", "1", "-o", filepath.Join(dir, "cat_%03d.png"), "--imatrix-out", dat)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	im, err := imatrix.OpenDat(dat)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, e := range im.Entries {
		found[e.Name] = true
	}
	for _, n := range []string{"model.diffusion_model.blocks.0.self_attn.q.weight", "model.diffusion_model.blocks.0.cross_attn.k.weight",
		"model.diffusion_model.head.head.weight", "text_encoders.t5xxl.transformer.encoder.block.1.layer.1.DenseReluDense.wo.weight"} {
		if !found[n] {
			t.Errorf("no importance entry for %s", n)
		}
	}
	var pngs, avis []image.Image
	for i, j := range jpegs {
		f, err := os.Open(filepath.Join(dir, "cat_00"+string(rune('0'+i))+".png"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		q, err := jpeg.Decode(bytes.NewReader(j))
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		pngs, avis = append(pngs, p), append(avis, q)
	}
	for i := range pngs {
		for j := range avis {
			if j != i && meanAbsDiff(pngs[i], avis[j]) <= meanAbsDiff(pngs[i], avis[i]) {
				t.Errorf("PNG frame %d is as close to AVI frame %d as to its own", i, j)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cat_005.png")); err == nil {
		t.Error("a sixth frame was written")
	}
}

func TestGenerateVideoCompare(t *testing.T) {
	dir := t.TempDir()
	code, stdout, errOut := runApp(t, "generate", "-m", tinyWan, "-M", "vid_gen", "--video-frames", "5", "-p", "a cat", "--steps", "1",
		"-W", "16", "-H", "16", "-t", "1", "-o", filepath.Join(dir, "v.avi"), "--compare", tinyWan, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r compareResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if !r.Identical || len(r.Frames) != 5 || r.Flicker != 0 || len(r.Blocks) != 1 || r.Blocks[0].Name != "blocks.0" {
		t.Errorf("the model against itself: %+v", r)
	}
	if r.Frames[1].Change == 0 || r.Frames[1].Change != r.Frames[1].RefChange {
		t.Errorf("frame 1 changes by %g, the reference's by %g", r.Frames[1].Change, r.Frames[1].RefChange)
	}
}

func TestGenerateVideoErrors(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 16, 16))); err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(dir, "init.png")
	if err := os.WriteFile(init, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-m", tinyGGUF, "-M", "vid_gen", "-o", filepath.Join(dir, "a.avi")}, "is not a video model"},
		{[]string{"-m", tinyWan, "-o", filepath.Join(dir, "a.avi")}, "needs -M vid_gen"},
		{[]string{"-m", tinyWan, "-M", "vid_gen", "-o", filepath.Join(dir, "a_%d.jpg")}, "must be .png files"},
		{[]string{"-m", tinyWan, "-M", "vid_gen", "-o", filepath.Join(dir, "a.png")}, "name the frames with an index"},
		{[]string{"-m", tinyWan, "-M", "movie", "-o", filepath.Join(dir, "a.png")}, "want img_gen or vid_gen"},
		{[]string{"-m", tinyWan, "-M", "vid_gen", "-i", init, "-o", filepath.Join(dir, "a.avi")}, "(image-to-video) is not supported: it generates from text only"},
		{[]string{"-m", tinyWanTI2V, "-i", init, "-o", filepath.Join(dir, "a.png")}, "it needs -M vid_gen"},
	} {
		args := append([]string{"generate", "-p", "a cat", "--steps", "1", "-W", "16", "-H", "16", "-t", "1"}, c.args...)
		code, _, errOut := runApp(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want an error saying %q", c.args, code, errOut, c.want)
		}
	}
}

// TestReportVideo checks that report shows a video model's clip as its
// frames side by side: every image on the page is five frames wide.
func TestReportVideo(t *testing.T) {
	longtest.Skip(t, "a report of a video ladder")
	dir := t.TempDir()
	q := filepath.Join(dir, "tiny-wan-q8_0.gguf")
	if code, _, errOut := runApp(t, "quantize", tinyWan, "--type", "q8_0", "--allow-requantize", "-o", q); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	out := filepath.Join(dir, "report.html")
	code, _, errOut := runApp(t, "report", tinyWan, q, "-o", out, "-p", "a cat", "--steps", "1", "-W", "16", "-H", "16", "--video-frames", "5", "-t", "1")
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, errOut)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	const uri = "data:image/png;base64,"
	n := 0
	for rest := string(page); ; {
		i := strings.Index(rest, uri)
		if i < 0 {
			break
		}
		rest = rest[i+len(uri):]
		end := strings.IndexAny(rest, `"')`)
		b, err := base64.StdEncoding.DecodeString(html.UnescapeString(rest[:end])) // the template writes + as &#43;
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Width != 5*16 || cfg.Height != 16 {
			t.Errorf("an image of %dx%d, want the 5 frames of 16x16 side by side", cfg.Width, cfg.Height)
		}
		n++
	}
	if n == 0 {
		t.Error("the page has no images")
	}
}
