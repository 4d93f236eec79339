package infer

import (
	"slices"
	"strings"
	"testing"
)

// TestRefSize checks sd-cli's size rule for reference images against
// sizes worked out by hand: area min(1024², W·H), the reference's aspect,
// sides rounded to the nearest multiple of 16.
func TestRefSize(t *testing.T) {
	for _, c := range []struct{ w, h, rw, rh, ww, wh int }{
		{128, 128, 96, 64, 160, 112},       // sqrt(24576) = 156.8 -> 160; 104.5 -> 112
		{128, 128, 48, 112, 80, 192},       // sqrt(7021) = 83.8 -> 80; 195.5 -> 192
		{2048, 2048, 1000, 500, 1456, 720}, // capped at 1024²: 1448.2 -> 1456; 724.1 -> 720
		{512, 768, 1920, 1080, 832, 464},   // 836.1 -> 832; 470.3 -> 464
		{64, 64, 4, 4000, 0, 2000},         // too thin: no width left
	} {
		if w, h := RefSize(c.w, c.h, c.rw, c.rh, 16); w != c.ww || h != c.wh {
			t.Errorf("%dx%d reference for a %dx%d render: %dx%d, want %dx%d", c.rw, c.rh, c.w, c.h, w, h, c.ww, c.wh)
		}
	}
}

// TestResizeNearest checks the nearest rule (input index out·in/size) on
// two channels, down in width and up in height.
func TestResizeNearest(t *testing.T) {
	// Two channels of 3x2: values ch*100 + y*10 + x.
	var in []float32
	for ch := range 2 {
		for y := range 2 {
			for x := range 3 {
				in = append(in, float32(ch*100+y*10+x))
			}
		}
	}
	got := ResizeNearest(in, 3, 2, 2, 3) // x from 0, 1; y from 0, 0, 1
	want := []float32{0, 1, 0, 1, 10, 11, 100, 101, 100, 101, 110, 111}
	if !slices.Equal(got, want) {
		t.Errorf("resized %v, want %v", got, want)
	}
	if same := ResizeNearest(in, 3, 2, 3, 2); &same[0] != &in[0] {
		t.Error("a resize to the same size copied the image")
	}
}

// TestCheckRefs checks that a family without reference latents refuses
// them, with its own reason when it has one, and that a malformed image
// is refused.
func TestCheckRefs(t *testing.T) {
	ref := RefImage{Pixels: make([]float32, 3*4*2), Width: 4, Height: 2}
	req := &Request{Refs: []RefImage{ref}}
	m := &Model{Family: &Family{Title: "Plain"}}
	if err := m.checkRefs(req); err == nil || !strings.Contains(err.Error(), "Plain: reference images are not supported") {
		t.Errorf("no reference latents: %v", err)
	}
	m.Family.RefsNeed = "it needs a vision tower"
	if err := m.checkRefs(req); err == nil || !strings.HasSuffix(err.Error(), "it needs a vision tower") {
		t.Errorf("with a reason: %v", err)
	}
	m.Family = &Family{Title: "Edit", RefLatents: true}
	if err := m.checkRefs(req); err != nil {
		t.Errorf("a family that reads them: %v", err)
	}
	bad := &Request{Refs: []RefImage{ref, {Pixels: make([]float32, 5), Width: 4, Height: 2}}}
	if err := m.checkRefs(bad); err == nil || !strings.Contains(err.Error(), "reference image 2: 5 values for 4x2 pixels") {
		t.Errorf("malformed: %v", err)
	}
	if err := m.checkRefs(&Request{}); err != nil {
		t.Errorf("no references: %v", err)
	}
}
