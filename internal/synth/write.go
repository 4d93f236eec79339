package synth

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
)

// TinySD1 is the spec of testdata/tiny-sd1.safetensors: every SD1 tensor
// name, UNet model channels 8, VAE channels 4, a 64-wide CLIP-L with 256-wide
// MLP rows (k-quants apply to mlp.fc2) and two layers, f16.
var TinySD1 = Spec{Arch: "sd1", Scale: 0.025, TextScale: 1.0 / 12, VAEScale: 1.0 / 32, Depth: 2, Seed: 1, DType: formats.F16}

// Write generates spec into path: GGUF when the name ends in .gguf,
// safetensors otherwise. The file is written through path+".partial" and
// renamed when complete.
func Write(path string, spec Spec) (err error) {
	f, err := os.Create(path + ".partial")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path + ".partial")
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	format := "safetensors"
	if strings.EqualFold(filepath.Ext(path), ".gguf") {
		format = "gguf"
	}
	if err := WriteTo(bw, format, spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".partial", path)
}

// Metadata returns the metadata written with spec: the architecture, the
// generator's parameters and (safetensors) "format": "pt".
func Metadata(spec Spec) map[string]string {
	return map[string]string{
		"format":          "pt",
		"sdtool.synth":    spec.String(),
		"modelspec.title": "synthetic " + spec.Arch,
	}
}

// String describes spec in one line ("arch=sd1 scale=0.025 ...").
func (s Spec) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return fmt.Sprintf("arch=%s scale=%s text_scale=%s vae_scale=%s depth=%d seed=%d dtype=%s",
		s.Arch, f(s.Scale), f(s.TextScale), f(s.VAEScale), s.Depth, s.Seed, s.DType)
}

// WriteTo streams spec to w in format "safetensors" or "gguf".
func WriteTo(w io.Writer, format string, spec Spec) error {
	ts, err := Tensors(spec)
	if err != nil {
		return err
	}
	desc, err := Descriptors(spec)
	if err != nil {
		return err
	}
	var tw formats.TensorWriter
	switch format {
	case "safetensors":
		tw, err = safetensors.NewWriter(w, desc, Metadata(spec), nil)
	case "gguf":
		meta := formats.Metadata{
			{Key: "general.architecture", Type: formats.TypeString, Value: spec.Arch},
			{Key: "general.name", Type: formats.TypeString, Value: "synthetic " + spec.Arch},
			{Key: "sdtool.synth", Type: formats.TypeString, Value: spec.String()},
		}
		tw, err = gguf.NewWriter(w, desc, meta, nil)
	default:
		return fmt.Errorf("synth: unknown output format %q", format)
	}
	if err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	for _, t := range ts {
		if _, err := io.CopyBuffer(tw, Data(spec, t), buf); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}
	return tw.Close()
}
