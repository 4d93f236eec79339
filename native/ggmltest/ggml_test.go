//go:build cgo

package ggmltest

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func TestLayoutsMatchRegistry(t *testing.T) {
	for _, dt := range formats.Types() {
		if !dt.InLinkedGGML() {
			continue
		}
		name := TypeName(dt)
		bs, bb := BlockLayout(dt)
		info := dt.Info()
		if name != info.Name || bs != info.BlockSize || bb != info.BlockBytes {
			t.Errorf("id %d: ggml %s %d/%d, registry %s %d/%d", dt, name, bs, bb, info.Name, info.BlockSize, info.BlockBytes)
		}
	}
}

func TestQuantizeRoundTrip(t *testing.T) {
	src := make([]float32, 256)
	for i := range src {
		src[i] = float32(i%17) - 8
	}
	q, err := QuantizeChunk(formats.Q8_0, src, 256, nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Dequantize(formats.Q8_0, q, 256)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if d := back[i] - src[i]; d > 0.05 || d < -0.05 {
			t.Fatalf("element %d: %v -> %v", i, src[i], back[i])
		}
	}
	if _, err := QuantizeChunk(formats.IQ2_XXS, src, 256, nil); err == nil {
		t.Error("iq2_xxs without weights was accepted")
	}
}
