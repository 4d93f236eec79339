package pngtext

import (
	"bytes"
	"compress/zlib"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestWriteRoundTrip(t *testing.T) {
	img := randomImage(17, 9, 8) // opaque
	const params = "a photo of a cat\nNegative prompt: dog\nSteps: 20, Sampler: Euler, CFG scale: 7, Seed: 42"
	var buf bytes.Buffer
	if err := Write(&buf, img, map[string]string{ParametersKey: params}, nil); err != nil {
		t.Fatal(err)
	}
	// The standard decoder accepts the file and the pixels survive.
	dec, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for y := 0; y < 9; y++ {
		for x := 0; x < 17; x++ {
			if a, b := color.RGBAModel.Convert(dec.At(x, y)), img.At(x, y); a != b {
				t.Fatalf("pixel (%d, %d): %v, want %v", x, y, a, b)
			}
		}
	}
	// 8-bit RGB (colour type 2), since the image is opaque.
	if b := buf.Bytes(); b[24] != 8 || b[25] != 2 {
		t.Fatalf("bit depth %d colour type %d", b[24], b[25])
	}
	// The text chunk comes right after IHDR and reads back.
	if typ := string(buf.Bytes()[37:41]); typ != "tEXt" {
		t.Fatalf("chunk after IHDR is %q", typ)
	}
	text, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if text[ParametersKey] != params || len(text) != 1 {
		t.Fatalf("text %q", text)
	}
}

func TestWriteUnicodeAndKeys(t *testing.T) {
	img := flatImage(2, 2, 9)
	text := map[string]string{"parameters": "一只猫 (cat:1.1)", "Software": "sdtool", "Comment": "café"}
	var buf bytes.Buffer
	if err := Write(&buf, img, text, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// Sorted keys: Comment (tEXt, Latin-1 é), Software (tEXt), parameters (iTXt: not Latin-1).
	if !bytes.Contains(b, []byte("tEXtComment\x00caf\xe9")) || !bytes.Contains(b, []byte("iTXtparameters\x00\x00\x00\x00\x00")) {
		t.Fatalf("chunk encodings: %q", b[:120])
	}
	got, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range text {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{"", " lead", "x\x00y", strings.Repeat("k", 80), "ключ"} {
		if err := Write(&bytes.Buffer{}, img, map[string]string{bad: "v"}, nil); err == nil {
			t.Errorf("keyword %q accepted", bad)
		}
	}
	if err := Write(&bytes.Buffer{}, img, map[string]string{"a": "v"}, []string{"b"}); err == nil {
		t.Error("missing key accepted")
	}
}

func TestReadCompressed(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, flatImage(1, 1, 0), nil, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	var chunks bytes.Buffer
	deflate := func(s string) []byte {
		var z bytes.Buffer
		w := zlib.NewWriter(&z)
		w.Write([]byte(s))
		w.Close()
		return z.Bytes()
	}
	writeChunk(&chunks, "zTXt", append([]byte("Title\x00\x00"), deflate("caf\xe9")...))
	writeChunk(&chunks, "iTXt", append([]byte("parameters\x00\x01\x00en\x00Parameter\x00"), deflate("猫")...))
	withText := append(append(append([]byte{}, b[:33]...), chunks.Bytes()...), b[33:]...)
	got, err := Read(bytes.NewReader(withText))
	if err != nil {
		t.Fatal(err)
	}
	if got["Title"] != "café" || got["parameters"] != "猫" {
		t.Fatalf("%q", got)
	}
}

func TestReadErrors(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, flatImage(3, 3, 1), map[string]string{ParametersKey: "p\nSteps: 0, CFG scale: 0, Seed: 0, Size: 0x0"}, nil); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	corrupt := func(i int) []byte {
		b := append([]byte{}, good...)
		b[i] ^= 0x40
		return b
	}
	cases := map[string][]byte{
		"empty":          nil,
		"not png":        []byte("GIF89a.........."),
		"truncated":      good[:len(good)-6],
		"text crc":       corrupt(45), // a byte inside the tEXt chunk
		"huge length":    append(append([]byte{}, good[:33]...), 0xff, 0xff, 0xff, 0xf0, 't', 'E', 'X', 't'),
		"no keyword":     withChunk(good, "tEXt", []byte("novalue")),
		"bad ztxt":       withChunk(good, "zTXt", []byte("k\x00\x00notzlib")),
		"ztxt method":    withChunk(good, "zTXt", []byte("k\x00\x05")),
		"itxt short":     withChunk(good, "iTXt", []byte("k\x00\x00")),
		"itxt flag":      withChunk(good, "iTXt", []byte("k\x00\x02\x00\x00\x00x")),
		"itxt not utf-8": withChunk(good, "iTXt", []byte("k\x00\x00\x00\x00\x00\xff")),
	}
	for name, b := range cases {
		if _, err := Read(bytes.NewReader(b)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

// withChunk inserts one chunk after IHDR.
func withChunk(p []byte, typ string, data []byte) []byte {
	var c bytes.Buffer
	writeChunk(&c, typ, data)
	return append(append(append([]byte{}, p[:33]...), c.Bytes()...), p[33:]...)
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	if err := Write(&buf, flatImage(2, 2, 3), map[string]string{"parameters": "a cat", "x": "猫"}, nil); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(withChunk(buf.Bytes(), "zTXt", []byte("k\x00\x00x\x9c\x03\x00\x00\x00\x00\x01")))
	f.Fuzz(func(t *testing.T, b []byte) {
		text, err := Read(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error not ErrFormat: %v", err)
			}
			return
		}
		// Whatever was read writes back and reads back the same (keywords that Write refuses aside).
		for k := range text {
			if !validKeyword(k) {
				return
			}
		}
		var out bytes.Buffer
		if err := Write(&out, flatImage(1, 1, 0), text, nil); err != nil {
			return // e.g. a value with NUL bytes that is not valid UTF-8
		}
		again, err := Read(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range text {
			if again[k] != v {
				t.Fatalf("%q: %q -> %q", k, v, again[k])
			}
		}
	})
}

func randomImage(w, h int, seed uint64) *image.RGBA {
	r := rand.New(rand.NewPCG(seed, 1))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.IntN(256))
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	return img
}

func flatImage(w, h int, v uint8) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = v
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	return img
}
