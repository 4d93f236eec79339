//go:build cgo

package quant

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
)

// TestCanaryGGMLUnfused fails when the linked ggml's q4_0 reference
// quantizer was compiled with fused multiply-adds (gcc with -march=native
// and without -ffp-contract=off): its bytes then no longer match
// stable-diffusion.cpp's, nor sdtool's.
func TestCanaryGGMLUnfused(t *testing.T) {
	cases := findFMACases(64)
	if len(cases) < 16 {
		t.Fatalf("search found only %d inputs where fusing changes q4_0", len(cases))
	}
	src := make([]float32, 0, 32*len(cases))
	for _, c := range cases {
		src = append(src, c.block[:]...)
	}
	out, err := ggmltest.QuantizeChunk(formats.Q4_0, src, 32, nil)
	if err != nil {
		t.Fatal(err)
	}
	fused := 0
	for i, c := range cases {
		switch got := q4CodeAt(out[i*q4_0Bytes:], c.pos); got {
		case c.unfused:
		case c.fused:
			fused++
		default:
			t.Errorf("case %d: ggml code %d is neither the unfused %d nor the fused %d", i, got, c.unfused, c.fused)
		}
	}
	if fused > 0 {
		t.Fatalf("the linked ggml fuses multiply-adds in quantize_row_q4_0_ref (%d of %d probe inputs): "+
			"build with CGO_CFLAGS including -ffp-contract=off", fused, len(cases))
	}
}
