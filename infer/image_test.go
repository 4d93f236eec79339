package infer

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"math"
	"testing"
)

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
	// NaN and +Inf are white, -Inf black: sd.cpp's std::min(1, v) keeps the bound when v is NaN.
	nan := float32(math.NaN())
	odd, err := ImageFromCHW([]float32{nan, float32(math.Inf(1)), float32(math.Inf(-1)), nan, nan, nan}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint8{255, 0, 255, 255, 255, 255, 255, 255}; !bytes.Equal(odd.Pix, want) {
		t.Errorf("NaN/Inf pixels %v, want %v", odd.Pix, want)
	}
	if _, err := ImageFromCHW(data, 3, 2); !errors.Is(err, ErrImageSize) {
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

// TestCHWFromImageModels checks that every colour model and a sub-image with an offset origin give the
// planes of the same pixels.
func TestCHWFromImageModels(t *testing.T) {
	rgba := image.NewRGBA(image.Rect(0, 0, 5, 4))
	for i := range rgba.Pix {
		rgba.Pix[i] = uint8(37 * i)
		if i%4 == 3 {
			rgba.Pix[i] = 255
		}
	}
	want, w, h := CHWFromImage(rgba)
	if w != 5 || h != 4 || len(want) != 60 || want[0] != -1 || want[1] != float32(4*37%256)/255*2-1 {
		t.Fatalf("RGBA: %dx%d %v", w, h, want[:2])
	}
	nrgba := image.NewNRGBA(rgba.Rect)
	copy(nrgba.Pix, rgba.Pix)
	ycc := image.NewPaletted(rgba.Rect, nil) // any other model: read through At
	pal := color.Palette{}
	for y := 0; y < 4; y++ {
		for x := 0; x < 5; x++ {
			pal = append(pal, rgba.At(x, y))
			ycc.Pix[y*ycc.Stride+x] = uint8(len(pal) - 1)
		}
	}
	ycc.Palette = pal
	big := image.NewRGBA(image.Rect(-2, -3, 9, 8))
	for y := 0; y < 4; y++ {
		for x := 0; x < 5; x++ {
			big.Set(x+1, y+2, rgba.At(x, y))
		}
	}
	sub := big.SubImage(image.Rect(1, 2, 6, 6))
	for name, img := range map[string]image.Image{"NRGBA": nrgba, "Paletted": ycc, "SubImage": sub} {
		got, gw, gh := CHWFromImage(img)
		if gw != w || gh != h {
			t.Fatalf("%s: %dx%d", name, gw, gh)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: value %d = %v, want %v", name, i, got[i], want[i])
			}
		}
	}
}
