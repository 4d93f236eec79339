package avi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"testing"
)

// riffChunk is a chunk as the test's own reader finds it.
type riffChunk struct {
	id, list string
	off      int // of the body (after the list type for a LIST)
	data     []byte
	kids     []riffChunk
}

// parseChunks reads the chunks of b, descending into RIFF and LIST, and
// fails on a size that runs past its parent or odd padding left out.
func parseChunks(t *testing.T, b []byte, base int) []riffChunk {
	t.Helper()
	var out []riffChunk
	for i := 0; i < len(b); {
		if i+8 > len(b) {
			t.Fatalf("chunk header at %d runs past the end", base+i)
		}
		id, n := string(b[i:i+4]), int(binary.LittleEndian.Uint32(b[i+4:]))
		if i+8+n > len(b) {
			t.Fatalf("chunk %q at %d of %d bytes runs past its parent", id, base+i, n)
		}
		c := riffChunk{id: id, off: base + i + 8, data: b[i+8 : i+8+n]}
		if id == "RIFF" || id == "LIST" {
			c.list = string(c.data[:4])
			c.kids = parseChunks(t, c.data[4:], c.off+4)
		}
		out = append(out, c)
		i += 8 + n + n%2
	}
	return out
}

// find returns the first chunk with the id (or list type) among cs.
func find(t *testing.T, cs []riffChunk, id string) riffChunk {
	t.Helper()
	for _, c := range cs {
		if c.id == id || c.list == id {
			return c
		}
	}
	t.Fatalf("no %q chunk", id)
	return riffChunk{}
}

// testFrames are n frames of a gradient that moves a pixel per frame.
func testFrames(n, w, h int) []image.Image {
	out := make([]image.Image, n)
	for f := range out {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				img.Set(x, y, color.RGBA{uint8(4 * (x + f)), uint8(3 * y), uint8(40 * f), 255})
			}
		}
		out[f] = img
	}
	return out
}

// psnr compares two images' RGB values in dB.
func psnr(a, b image.Image) float64 {
	var se float64
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			ar, ag, ab, _ := a.At(x, y).RGBA()
			br, bg, bb, _ := b.At(x, y).RGBA()
			for _, d := range []float64{float64(ar>>8) - float64(br>>8), float64(ag>>8) - float64(bg>>8), float64(ab>>8) - float64(bb>>8)} {
				se += d * d
			}
		}
	}
	mse := se / float64(3*r.Dx()*r.Dy())
	return 10 * math.Log10(255*255/mse)
}

func TestWriteParses(t *testing.T) {
	const n, w, h, fps = 5, 48, 32, 16
	frames := testFrames(n, w, h)
	var buf bytes.Buffer
	if err := Write(&buf, frames, Options{FPS: fps}); err != nil {
		t.Fatal(err)
	}
	top := parseChunks(t, buf.Bytes(), 0)
	if len(top) != 1 || top[0].id != "RIFF" || top[0].list != "AVI " || 8+len(top[0].data) != buf.Len() {
		t.Fatalf("not one RIFF AVI chunk covering the file: %+v", top)
	}
	riff := top[0].kids
	hdrl := find(t, riff, "hdrl")
	avih := find(t, hdrl.kids, "avih").data
	if len(avih) != 56 || binary.LittleEndian.Uint32(avih[0:]) != 1_000_000/fps || binary.LittleEndian.Uint32(avih[16:]) != n ||
		binary.LittleEndian.Uint32(avih[32:]) != w || binary.LittleEndian.Uint32(avih[36:]) != h {
		t.Errorf("avih %v", avih)
	}
	strl := find(t, hdrl.kids, "strl")
	strh, strf := find(t, strl.kids, "strh").data, find(t, strl.kids, "strf").data
	if len(strh) != 56 || string(strh[:8]) != "vidsMJPG" || binary.LittleEndian.Uint32(strh[24:]) != fps/binary.LittleEndian.Uint32(strh[20:]) ||
		binary.LittleEndian.Uint32(strh[32:]) != n {
		t.Errorf("strh %q", strh)
	}
	if len(strf) != 40 || string(strf[16:20]) != "MJPG" {
		t.Errorf("strf %q", strf)
	}
	movi := find(t, riff, "movi")
	idx := find(t, riff, "idx1").data
	if len(movi.kids) != n || len(idx) != 16*n {
		t.Fatalf("%d frame chunks and %d index bytes, want %d frames", len(movi.kids), len(idx), n)
	}
	for i, c := range movi.kids {
		e := idx[16*i:]
		if c.id != "00dc" || string(e[:4]) != "00dc" || binary.LittleEndian.Uint32(e[4:])&0x10 == 0 {
			t.Errorf("frame %d: chunk %q, index %q", i, c.id, e[:8])
		}
		// idx1 offsets count from the movi list's type field to the chunk header.
		if off := int(binary.LittleEndian.Uint32(e[8:])); movi.off+off+8 != c.off || int(binary.LittleEndian.Uint32(e[12:])) != len(c.data) {
			t.Errorf("frame %d: index offset %d, size %d; chunk body at %d of %d bytes", i, off, binary.LittleEndian.Uint32(e[12:]), c.off, len(c.data))
		}
		img, err := jpeg.Decode(bytes.NewReader(c.data))
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if p := psnr(frames[i], img); p < 30 {
			t.Errorf("frame %d decodes at %.1f dB from its source", i, p)
		}
		if i > 0 && psnr(frames[i-1], img) > psnr(frames[i], img) {
			t.Errorf("frame %d is closer to frame %d: out of order", i, i-1)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	fr := testFrames(2, 8, 8)
	for _, c := range []struct {
		name   string
		frames []image.Image
		opt    Options
	}{
		{"no frames", nil, Options{FPS: 16}},
		{"zero fps", fr, Options{}},
		{"sizes differ", append(fr, image.NewRGBA(image.Rect(0, 0, 8, 9))), Options{FPS: 16}},
	} {
		if err := Write(&bytes.Buffer{}, c.frames, c.opt); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", c.name, err)
		}
	}
}
