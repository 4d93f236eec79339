package synth

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/sdtool/sdtool/formats"
	// The formats the generator writes, registered with formats.CreatorFor.
	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
)

// TinySD1 is a Spec of every real SD1 tensor name (skip connections and
// shortcut convolutions included) at a tiny width: UNet model channels 8, VAE
// channels 4, a 64-wide CLIP-L with 256-wide MLP rows (k-quants apply to
// mlp.fc2) and two layers, f16. Too narrow to run (GroupNorm needs 32
// channels); the committed runnable model is TinySD.
var TinySD1 = Spec{Arch: "sd1", Scale: 0.025, TextScale: 1.0 / 12, VAEScale: 1.0 / 32, Depth: 2, Seed: 1, DType: formats.F16}

// Write generates spec into path in the format its extension chooses
// (formats.CreatorFor: .gguf or .safetensors), through the pipeline's
// atomic publish.
func Write(path string, spec Spec) error {
	c, err := formats.CreatorFor(path)
	if err != nil {
		return err
	}
	return pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		if err := WriteTo(w, c.Name, spec); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
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
	var meta formats.Metadata
	switch format {
	case "safetensors":
		for k, v := range Metadata(spec) {
			meta = append(meta, formats.KV{Key: k, Type: formats.TypeString, Value: v})
		}
	case "gguf":
		meta = formats.Metadata{
			{Key: "general.architecture", Type: formats.TypeString, Value: spec.Arch},
			{Key: "general.name", Type: formats.TypeString, Value: "synthetic " + spec.Arch},
			{Key: "sdtool.synth", Type: formats.TypeString, Value: spec.String()},
		}
	}
	c, ok := formats.CreatorNamed(format)
	if !ok {
		return fmt.Errorf("synth: unknown output format %q", format)
	}
	tw, err := c.New(w, desc, formats.WriteOptions{Metadata: meta})
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
