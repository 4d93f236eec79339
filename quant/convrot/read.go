package convrot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// Where a module's quantization settings came from (Module.Source).
const (
	// SourceMarker is a <m>.comfy_quant tensor.
	SourceMarker = "comfy_quant"
	// SourceMetadata is the safetensors __metadata__ entry
	// "_quantization_metadata" ({"format_version": ..., "layers": {...}}).
	SourceMetadata = "_quantization_metadata"
	// SourceScaledFP8 is the legacy layout: a tensor named "scaled_fp8" in
	// the file (a writer that dequantizes drops it too) and <m>.scale_weight
	// (and <m>.scale_input) beside FP8 weights.
	SourceScaledFP8 = "scaled_fp8"
)

// Module is one quantized linear layer found by Detect.
type Module struct {
	// Name is the module prefix ("double_blocks.0.img_attn.qkv").
	Name string
	// Config holds the quantization settings.
	Config QuantConfig
	// Source says where Config came from: SourceMarker, SourceMetadata or SourceScaledFP8.
	Source string
	// Weight is the I8 or F8 weight, [out, in].
	Weight formats.Tensor
	// Scale is the weight scale: [out, 1], [out] or a single element.
	Scale formats.Tensor
	// Marker is the comfy_quant tensor; its Name is empty when Source is not SourceMarker.
	Marker formats.Tensor
	// InputScale is the optional activation scale (.input_scale or the
	// legacy .scale_input); its Name is empty when there is none.
	InputScale formats.Tensor
	// Unsupported reports a well-formed marker whose format this package
	// cannot decode (nvfp4, mxfp8, convrot_w4a4, ...): only Name,
	// Config.Format, Source and Marker are set, and a writer can copy the
	// module's tensors unchanged or refuse it.
	Unsupported bool
}

// Aux returns the names of the module's tensors other than the weight
// (scale, marker, input scale): a writer that dequantizes the module to
// floats drops them. For an unsupported module it is the marker alone.
func (m *Module) Aux() []string {
	var out []string
	for _, t := range []formats.Tensor{m.Scale, m.Marker, m.InputScale} {
		if t.Name != "" {
			out = append(out, t.Name)
		}
	}
	return out
}

// Detect finds the quantized modules of m, in the file order of their
// weights: every <m>.comfy_quant marker (a <m>.weight.comfy_quant key is
// ignored, as ComfyUI ignores it), then the layers of a safetensors
// "_quantization_metadata" entry that have no marker, then, when a
// "scaled_fp8" tensor is present, the legacy <m>.scale_weight layers whose
// weight is FP8 (a high-precision weight with a dummy scale_weight is left
// alone, unlike ComfyUI's converter). Each module is checked: weight dtype
// and shape, scale dtype and shape, group size against the row length. A
// well-formed marker naming a format this package cannot decode gives a
// module marked Unsupported, not an error, so that a listing can show it.
func Detect(m formats.Model) ([]Module, error) {
	tensors := m.Tensors()
	byName := make(map[string]int, len(tensors))
	for i, t := range tensors {
		byName[t.Name] = i
	}
	find := func(name string) (formats.Tensor, bool) {
		if i, ok := byName[name]; ok {
			return tensors[i], true
		}
		return formats.Tensor{}, false
	}
	seen := map[string]bool{}
	var mods []Module
	add := func(mod Module) error {
		if err := complete(m, &mod, find); err != nil {
			return err
		}
		seen[mod.Name] = true
		mods = append(mods, mod)
		return nil
	}

	for i := range tensors {
		t := &tensors[i]
		name, ok := strings.CutSuffix(t.Name, MarkerSuffix)
		if !ok || name == "" || strings.HasSuffix(name, ".weight") {
			continue
		}
		c, err := readMarker(m, t)
		if errors.Is(err, ErrUnsupportedFormat) {
			seen[name] = true
			mods = append(mods, Module{Name: name, Config: c, Source: SourceMarker, Marker: *t, Unsupported: true})
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := add(Module{Name: name, Config: c, Source: SourceMarker, Marker: *t}); err != nil {
			return nil, err
		}
	}

	if meta, ok := m.Metadata().String(SourceMetadata); ok {
		layers, err := metadataLayers(meta)
		if err != nil {
			return nil, fmt.Errorf("%s: metadata %q: %w", m.Path(), SourceMetadata, err)
		}
		for _, name := range sortedKeys(layers) {
			if seen[name] {
				continue
			}
			c, err := ParseQuantConfig(layers[name])
			if errors.Is(err, ErrUnsupportedFormat) {
				seen[name] = true
				mods = append(mods, Module{Name: name, Config: c, Source: SourceMetadata, Unsupported: true})
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s: metadata %q: layer %q: %w", m.Path(), SourceMetadata, name, err)
			}
			if err := add(Module{Name: name, Config: c, Source: SourceMetadata}); err != nil {
				return nil, err
			}
		}
	}

	if _, ok := find("scaled_fp8"); ok {
		for _, t := range tensors {
			name, ok := strings.CutSuffix(t.Name, ".scale_weight")
			if !ok || seen[name] {
				continue
			}
			w, ok := find(name + ".weight")
			if !ok {
				continue
			}
			var c QuantConfig
			switch w.Type {
			case formats.F8_E4M3:
				c.Format = FormatFP8E4M3
			case formats.F8_E5M2:
				c.Format = FormatFP8E5M2
			default:
				continue // a dummy scale beside a high-precision weight
			}
			if err := add(Module{Name: name, Config: c, Source: SourceScaledFP8}); err != nil {
				return nil, err
			}
		}
	}

	// File order of the weight; an unsupported module without one sorts by
	// its marker, or last.
	pos := func(mod *Module) int {
		for _, n := range []string{mod.Name + ".weight", mod.Marker.Name} {
			if i, ok := byName[n]; ok {
				return i
			}
		}
		return len(tensors)
	}
	sort.SliceStable(mods, func(i, j int) bool { return pos(&mods[i]) < pos(&mods[j]) })
	return mods, nil
}

// readMarker reads and parses a comfy_quant tensor.
func readMarker(m formats.Model, t *formats.Tensor) (QuantConfig, error) {
	file := fileOf(m, t)
	if t.Type != formats.U8 && t.Type != formats.I8 {
		return QuantConfig{}, fmt.Errorf("%s: tensor %q: a comfy_quant marker must be U8, not %s", file, t.Name, t.Type)
	}
	if len(t.Shape) != 1 {
		return QuantConfig{}, fmt.Errorf("%s: tensor %q: a comfy_quant marker must be 1-D, not shape %v", file, t.Name, t.Shape)
	}
	if t.Size > MaxMarkerSize || t.Size != t.Shape[0] {
		return QuantConfig{}, fmt.Errorf("%s: tensor %q: marker of %d bytes (at most %d)", file, t.Name, t.Size, MaxMarkerSize)
	}
	data, err := formats.ReadTensor(m, t)
	if err != nil {
		return QuantConfig{}, err
	}
	c, err := ParseQuantConfig(data)
	if err != nil {
		return c, fmt.Errorf("%s: tensor %q: %w", file, t.Name, err)
	}
	return c, nil
}

// metadataLayers decodes the layers of a _quantization_metadata entry.
func metadataLayers(meta string) (map[string]json.RawMessage, error) {
	var doc struct {
		Layers map[string]json.RawMessage `json:"layers"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(meta)))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return doc.Layers, nil
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fileOf names the file of t for error messages.
func fileOf(m formats.Model, t *formats.Tensor) string {
	if t.File != "" {
		return t.File
	}
	return m.Path()
}

// complete finds and checks the weight and scale tensors of mod.
func complete(m formats.Model, mod *Module, find func(string) (formats.Tensor, bool)) error {
	wname := mod.Name + ".weight"
	w, ok := find(wname)
	if !ok {
		return fmt.Errorf("%s: module %q (%s): no tensor %q", m.Path(), mod.Name, mod.Source, wname)
	}
	file := fileOf(m, &w)
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return fmt.Errorf("%s: tensor %q: shape %v is not a 2-D [out, in] weight", file, w.Name, w.Shape)
	}
	out, in := w.Shape[0], w.Shape[1]
	want := formats.I8
	if t, ok := formatType(mod.Config.Format); ok {
		want = t
	}
	if w.Type != want {
		return fmt.Errorf("%s: tensor %q: format %s needs %s weights, not %s", file, w.Name, mod.Config.Format, want, w.Type)
	}
	if mod.Config.Convrot && in%int64(mod.Config.GroupSize) != 0 {
		return fmt.Errorf("%s: tensor %q: row length %d is not divisible by convrot_groupsize %d",
			file, w.Name, in, mod.Config.GroupSize)
	}

	sname, iname := mod.Name+".weight_scale", mod.Name+".input_scale"
	if mod.Source == SourceScaledFP8 {
		sname, iname = mod.Name+".scale_weight", mod.Name+".scale_input"
	}
	s, ok := find(sname)
	if !ok {
		return fmt.Errorf("%s: module %q (%s %s): no tensor %q", file, mod.Name, mod.Source, mod.Config.Format, sname)
	}
	sfile := fileOf(m, &s)
	switch s.Type {
	case formats.F32, formats.F16, formats.BF16:
	default:
		return fmt.Errorf("%s: tensor %q: scale type %s is not f32, f16 or bf16", sfile, s.Name, s.Type)
	}
	n := s.Elements()
	perRow := n == out && (len(s.Shape) == 1 || len(s.Shape) == 2 && s.Shape[1] == 1)
	switch {
	case mod.Config.Format == FormatInt8 && perRow:
	case n == 1 && len(s.Shape) <= 2 && !mod.Config.Convrot:
	case n == 1 && out == 1 && len(s.Shape) <= 2:
	default:
		what := "one element (a tensor-wise scale)"
		if mod.Config.Convrot {
			what = fmt.Sprintf("[%d, 1] (convrot needs a scale per row)", out)
		} else if mod.Config.Format == FormatInt8 {
			what = fmt.Sprintf("[%d, 1] or one element", out)
		}
		return fmt.Errorf("%s: tensor %q: scale shape %v for weight %v, want %s", sfile, s.Name, s.Shape, w.Shape, what)
	}
	mod.Weight, mod.Scale = w, s
	if t, ok := find(iname); ok {
		mod.InputScale = t
	}
	return nil
}

// Decoder turns rows of a quantized module back into float32 weights. It
// holds the module's scales (read once) and is safe for concurrent use.
type Decoder struct {
	mod     Module
	rows    Int8Rows
	scales  []float32 // per row (INT8 per-row), else one value
	fp8     FP8
	isFP8   bool
	rowSize int64 // bytes per weight row
}

// NewDecoder reads mod's scale tensor from m and returns its decoder.
func NewDecoder(m formats.Model, mod Module) (*Decoder, error) {
	if mod.Unsupported || mod.Scale.Name == "" || len(mod.Weight.Shape) != 2 {
		return nil, fmt.Errorf("%s: module %q: cannot decode format %q (%w)", m.Path(), mod.Name, mod.Config.Format, ErrUnsupportedFormat)
	}
	file := fileOf(m, &mod.Scale)
	raw, err := formats.ReadTensor(m, &mod.Scale)
	if err != nil {
		return nil, err
	}
	scales := make([]float32, mod.Scale.Elements())
	if err := quant.DecodeFloats(mod.Scale.Type, scales, raw); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", file, mod.Scale.Name, err)
	}
	if _, ok := absMax(scales); !ok {
		return nil, fmt.Errorf("%s: tensor %q: a scale is NaN or infinite", file, mod.Scale.Name)
	}
	d := &Decoder{mod: mod, scales: scales, rowSize: mod.Weight.Shape[1]}
	if t, ok := formatType(mod.Config.Format); ok {
		d.isFP8, d.fp8 = true, FP8{Type: t, Scale: scales[0]}
		return d, nil
	}
	g := 0
	if mod.Config.Convrot {
		g = mod.Config.GroupSize
	}
	if d.rows, err = NewInt8Rows(int(d.rowSize), g); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", fileOf(m, &mod.Weight), mod.Weight.Name, err)
	}
	return d, nil
}

// Module returns the module the decoder reads.
func (d *Decoder) Module() Module { return d.mod }

// Decode turns raw, whole weight rows starting at row first (one byte per
// element), into dst (the same number of elements).
func (d *Decoder) Decode(dst []float32, first int64, raw []byte) error {
	w := &d.mod.Weight
	if len(raw) != len(dst) || int64(len(raw))%d.rowSize != 0 {
		return fmt.Errorf("tensor %q: %d bytes and %d floats are not the same whole number of rows of %d",
			w.Name, len(raw), len(dst), d.rowSize)
	}
	n := int64(len(raw)) / d.rowSize
	if first < 0 || first+n > w.Shape[0] {
		return fmt.Errorf("tensor %q: rows [%d, %d) out of range (%d rows)", w.Name, first, first+n, w.Shape[0])
	}
	if d.isFP8 {
		return d.fp8.Decode(dst, raw)
	}
	scales := d.scales
	if len(scales) == 1 && w.Shape[0] != 1 {
		// A tensor-wise INT8 scale: every row shares it.
		for r := int64(0); r < n; r++ {
			lo, hi := r*d.rowSize, (r+1)*d.rowSize
			if err := d.rows.Dequantize(dst[lo:hi], raw[lo:hi], scales); err != nil {
				return fmt.Errorf("tensor %q: %w", w.Name, err)
			}
		}
		return nil
	}
	if err := d.rows.Dequantize(dst, raw, scales[first:first+n]); err != nil {
		return fmt.Errorf("tensor %q: %w", w.Name, err)
	}
	return nil
}

// ReadRows reads n weight rows starting at row first from m and decodes them
// into dst (n·in floats).
func (d *Decoder) ReadRows(m formats.Model, first, n int64, dst []float32) error {
	w := &d.mod.Weight
	if int64(len(dst)) != n*d.rowSize {
		return fmt.Errorf("%s: tensor %q: %d floats for %d rows of %d", fileOf(m, w), w.Name, len(dst), n, d.rowSize)
	}
	raw := make([]byte, n*d.rowSize)
	if err := formats.ReadRows(m, w, first, n, raw); err != nil {
		return err
	}
	if err := d.Decode(dst, first, raw); err != nil {
		return fmt.Errorf("%s: %w", fileOf(m, w), err)
	}
	return nil
}
