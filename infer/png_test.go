package infer

import (
	"bytes"
	"compress/zlib"
	"errors"
	"image/png"
	"math"
	"strings"
	"testing"
)

func TestGenerationParamsString(t *testing.T) {
	p := GenerationParams{
		Prompt: "a (cat:1.2)", NegativePrompt: "blurry", Steps: 20, Sampler: EulerAncestral,
		Scheduler: SchedulerKarras, CFGScale: 7, Seed: 42, Width: 512, Height: 768,
		Model: "v1-5-pruned-emaonly.q4_K", RNG: RNGCUDA, Version: "sdtool",
	}
	want := "a (cat:1.2)\nNegative prompt: blurry\nSteps: 20, Sampler: Euler a, Schedule type: Karras, CFG scale: 7, " +
		"Seed: 42, Size: 512x768, Model: v1-5-pruned-emaonly.q4_K, RNG: cuda, Version: sdtool"
	if got := p.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	q := GenerationParams{Prompt: "x", Steps: 4, Sampler: DPMPP2M, CFGScale: 7.5, Seed: -1, Width: 64, Height: 64,
		Model: "a, b", Strength: 0.75}
	want = "x\nSteps: 4, Sampler: DPM++ 2M, CFG scale: 7.5, Seed: -1, Size: 64x64, Model: \"a, b\", Denoising strength: 0.75"
	if got := q.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestWritePNGRoundTrip(t *testing.T) {
	img := randomImage(17, 9, 8) // opaque
	params := GenerationParams{Prompt: "a photo of a cat", NegativePrompt: "dog", Steps: 20, Sampler: Euler,
		Scheduler: SchedulerDiscrete, CFGScale: 7, Seed: 42, Width: 17, Height: 9, Model: "tiny-sd1.gguf"}
	var buf bytes.Buffer
	if err := WritePNGWithParams(&buf, img, params); err != nil {
		t.Fatal(err)
	}
	// The standard decoder accepts the file and the pixels survive.
	dec, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := PSNR(img, dec); !math.IsInf(p, 1) {
		t.Fatalf("pixels changed: PSNR %v", p)
	}
	// 8-bit RGB (colour type 2), since the image is opaque.
	if b := buf.Bytes(); b[24] != 8 || b[25] != 2 {
		t.Fatalf("bit depth %d colour type %d", b[24], b[25])
	}
	// The text chunk comes right after IHDR and reads back.
	if typ := string(buf.Bytes()[37:41]); typ != "tEXt" {
		t.Fatalf("chunk after IHDR is %q", typ)
	}
	text, err := PNGText(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if text[PNGParametersKey] != params.String() || len(text) != 1 {
		t.Fatalf("text %q", text)
	}
}

func TestWritePNGUnicodeAndKeys(t *testing.T) {
	img := flatImage(2, 2, 9)
	text := map[string]string{"parameters": "一只猫 (cat:1.1)", "Software": "sdtool", "Comment": "café"}
	var buf bytes.Buffer
	if err := WritePNG(&buf, img, text, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// Sorted keys: Comment (tEXt, Latin-1 é), Software (tEXt), parameters (iTXt: not Latin-1).
	if !bytes.Contains(b, []byte("tEXtComment\x00caf\xe9")) || !bytes.Contains(b, []byte("iTXtparameters\x00\x00\x00\x00\x00")) {
		t.Fatalf("chunk encodings: %q", b[:120])
	}
	got, err := PNGText(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range text {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{"", " lead", "x\x00y", strings.Repeat("k", 80), "ключ"} {
		if err := WritePNG(&bytes.Buffer{}, img, map[string]string{bad: "v"}, nil); err == nil {
			t.Errorf("keyword %q accepted", bad)
		}
	}
	if err := WritePNG(&bytes.Buffer{}, img, map[string]string{"a": "v"}, []string{"b"}); err == nil {
		t.Error("missing key accepted")
	}
}

func TestPNGTextCompressed(t *testing.T) {
	var buf bytes.Buffer
	if err := WritePNG(&buf, flatImage(1, 1, 0), nil, nil); err != nil {
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
	got, err := PNGText(bytes.NewReader(withText))
	if err != nil {
		t.Fatal(err)
	}
	if got["Title"] != "café" || got["parameters"] != "猫" {
		t.Fatalf("%q", got)
	}
}

func TestPNGTextErrors(t *testing.T) {
	var buf bytes.Buffer
	if err := WritePNGWithParams(&buf, flatImage(3, 3, 1), GenerationParams{Prompt: "p"}); err != nil {
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
		if _, err := PNGText(bytes.NewReader(b)); !errors.Is(err, ErrPNG) {
			t.Errorf("%s: err = %v, want ErrPNG", name, err)
		}
	}
}

// withChunk inserts one chunk after IHDR.
func withChunk(p []byte, typ string, data []byte) []byte {
	var c bytes.Buffer
	writeChunk(&c, typ, data)
	return append(append(append([]byte{}, p[:33]...), c.Bytes()...), p[33:]...)
}

func TestImageFromCHW(t *testing.T) {
	// One pixel per interesting value: -1 -> 0, 1 -> 255, 0 -> 127 (truncated), out of range clamps.
	data := []float32{
		-1, 1, 0, 5, // R
		-3, 0.5, 1, -1, // G
		0, 0, 0, 0, // B
	}
	img, err := ImageFromCHW(data, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantR := []uint8{0, 255, 127, 255}
	wantG := []uint8{0, 191, 255, 0}
	for i := 0; i < 4; i++ {
		if img.Pix[4*i] != wantR[i] || img.Pix[4*i+1] != wantG[i] || img.Pix[4*i+2] != 127 || img.Pix[4*i+3] != 255 {
			t.Fatalf("pixel %d = %v", i, img.Pix[4*i:4*i+4])
		}
	}
	if _, err := ImageFromCHW(data, 3, 2); !errors.Is(err, ErrSize) {
		t.Fatalf("wrong size: %v", err)
	}
	// CHWFromImage inverts it up to the 8-bit rounding.
	back, w, h := CHWFromImage(img)
	if w != 2 || h != 2 || back[1] != 1 || back[0] != -1 {
		t.Fatalf("CHWFromImage: %v %dx%d", back, w, h)
	}
	again, _ := ImageFromCHW(back, 2, 2)
	if !bytes.Equal(again.Pix, img.Pix) {
		t.Fatalf("round trip: %v vs %v", again.Pix, img.Pix)
	}
}

func FuzzPNGText(f *testing.F) {
	var buf bytes.Buffer
	if err := WritePNG(&buf, flatImage(2, 2, 3), map[string]string{"parameters": "a cat", "x": "猫"}, nil); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(withChunk(buf.Bytes(), "zTXt", []byte("k\x00\x00x\x9c\x03\x00\x00\x00\x00\x01")))
	f.Fuzz(func(t *testing.T, b []byte) {
		text, err := PNGText(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrPNG) {
				t.Fatalf("error not ErrPNG: %v", err)
			}
			return
		}
		// Whatever was read writes back and reads back the same (keywords that WritePNG refuses aside).
		for k := range text {
			if !validKeyword(k) {
				return
			}
		}
		var out bytes.Buffer
		if err := WritePNG(&out, flatImage(1, 1, 0), text, nil); err != nil {
			return // e.g. a value with NUL bytes that is not valid UTF-8
		}
		again, err := PNGText(bytes.NewReader(out.Bytes()))
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
