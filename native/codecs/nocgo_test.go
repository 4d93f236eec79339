package codecs

import (
	"errors"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/quant"
)

// TestNoCgoError checks what a cgo-free binary says when asked for a grid IQ
// type: a clear error that names the type and cgo, while the Go
// dequantizer still reads such tensors back.
func TestNoCgoError(t *testing.T) {
	if native.Available {
		t.Skip("ggml is linked")
	}
	_, err := quant.Encoder(formats.IQ2_XXS)
	if err == nil {
		t.Fatal("iq2_xxs has a quantizer without cgo")
	}
	const want = "quantizing to iq2_xxs needs ggml: this binary was built without cgo"
	if !strings.Contains(err.Error(), want) || !errors.Is(err, quant.ErrNoCodec) {
		t.Errorf("error %q, want it to contain %q and wrap quant.ErrNoCodec", err, want)
	}
	if _, err := quant.Decoder(formats.IQ2_XXS); err != nil {
		t.Errorf("iq2_xxs cannot be decoded without cgo: %v", err)
	}
}
