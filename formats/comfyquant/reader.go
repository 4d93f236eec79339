package comfyquant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sdtool/sdtool/formats"
)

// ParseQuantConfig decodes and checks a comfy_quant marker. It accepts what
// ComfyUI accepts, with stricter types so that a damaged marker is reported
// rather than guessed at:
//
//   - the data is one UTF-8 JSON object (at most MaxMarkerSize bytes);
//   - "format" is a string; formats other than FormatInt8, FormatFP8E4M3 and
//     FormatFP8E5M2 give an error wrapping ErrUnsupportedFormat together
//     with a config that holds only Format, so that a listing can name it;
//   - "convrot" and "full_precision_matrix_mult" are booleans;
//   - "convrot_groupsize" is an integer literal (256, not 256.0 or "256"),
//     defaults to 256 when convrot is true, must then be a power of four, and
//     is ignored when convrot is false (as ComfyUI ignores it);
//   - "convrot", "convrot_groupsize" and "full_precision_matrix_mult" may
//     instead sit in a nested "params" object (older convert_to_quant
//     output); a top-level key wins over a nested one;
//   - other keys are tolerated and listed in Unknown, because ComfyUI
//     ignores them and producers add new ones ("per_row").
//
// A repeated key takes its last value, as Python's json.loads does.
func ParseQuantConfig(data []byte) (QuantConfig, error) {
	if len(data) > MaxMarkerSize {
		return QuantConfig{}, fmt.Errorf("%w: %d bytes, more than %d", ErrConfig, len(data), MaxMarkerSize)
	}
	if !utf8.Valid(data) {
		return QuantConfig{}, fmt.Errorf("%w: not UTF-8", ErrConfig)
	}
	top, err := decodeObject(data)
	if err != nil {
		return QuantConfig{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var params map[string]json.RawMessage
	if raw, ok := top["params"]; ok {
		if params, err = decodeObject(raw); err != nil {
			return QuantConfig{}, fmt.Errorf("%w: \"params\": %v", ErrConfig, err)
		}
	}
	// lookup finds a key at the top level, then in "params".
	lookup := func(key string) (json.RawMessage, bool) {
		if v, ok := top[key]; ok {
			return v, true
		}
		v, ok := params[key]
		return v, ok
	}

	var c QuantConfig
	raw, ok := top["format"]
	if !ok {
		return QuantConfig{}, fmt.Errorf("%w: no \"format\" key", ErrConfig)
	}
	if err := json.Unmarshal(raw, &c.Format); err != nil {
		return QuantConfig{}, fmt.Errorf("%w: \"format\" is %s, not a string", ErrConfig, short(raw))
	}
	if _, ok := knownFormats[c.Format]; !ok {
		// Other formats give other meanings to the remaining keys.
		return QuantConfig{Format: c.Format}, fmt.Errorf("%w %q", ErrUnsupportedFormat, c.Format)
	}
	known := map[string]bool{"format": true, "convrot": true, "convrot_groupsize": true,
		"full_precision_matrix_mult": true, "params": true}
	if c.Format == FormatW4A4 {
		known["linear_dtype"] = true
	}
	if c.Format == FormatW4A8 {
		known["group_size"] = true
	}
	if !c.Rotated() {
		// The 4-bit ConvRot formats are always rotated: ComfyUI ignores
		// their "convrot" key, which some converters write.
		if c.Convrot, err = boolKey(lookup, "convrot"); err != nil {
			return QuantConfig{}, err
		}
	} else {
		delete(known, "convrot")
	}
	if c.FullPrecisionMatMul, err = boolKey(lookup, "full_precision_matrix_mult"); err != nil {
		return QuantConfig{}, err
	}
	if c.Convrot || c.Rotated() {
		if c.GroupSize, err = intKey(lookup, "convrot_groupsize", DefaultGroupSize); err != nil {
			return QuantConfig{}, err
		}
	}
	if c.Format == FormatW4A8 {
		if c.QuantGroupSize, err = intKey(lookup, "group_size", 16); err != nil {
			return QuantConfig{}, err
		}
	}
	if raw, ok := lookup("linear_dtype"); ok && c.Format == FormatW4A4 {
		if err := json.Unmarshal(raw, &c.LinearDType); err != nil {
			return QuantConfig{}, fmt.Errorf("%w: \"linear_dtype\" is %s, not a string", ErrConfig, short(raw))
		}
		if c.LinearDType == "int4" {
			c.LinearDType = ""
		}
	}
	for k := range top {
		if !known[k] {
			c.Unknown = append(c.Unknown, k)
		}
	}
	for k := range params {
		if !known[k] {
			c.Unknown = append(c.Unknown, "params."+k)
		}
	}
	sort.Strings(c.Unknown)
	if err := c.validate(); err != nil {
		return QuantConfig{}, err
	}
	return c, nil
}

// decodeObject decodes one JSON object into its raw members and refuses
// anything after it.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object: %s", short(data))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the JSON object")
	}
	return m, nil
}

// boolKey reads an optional boolean key.
func boolKey(lookup func(string) (json.RawMessage, bool), key string) (bool, error) {
	raw, ok := lookup(key)
	if !ok {
		return false, nil
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false", "null":
		return false, nil
	}
	return false, fmt.Errorf("%w: %q is %s, not true or false", ErrConfig, key, short(raw))
}

// intKey reads an optional integer key, def when it is absent.
func intKey(lookup func(string) (json.RawMessage, bool), key string, def int) (int, error) {
	raw, ok := lookup(key)
	if !ok {
		return def, nil
	}
	v, err := intValue(raw)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %v", ErrConfig, key, err)
	}
	return v, nil
}

// intValue reads a JSON integer literal that fits in an int.
func intValue(raw json.RawMessage) (int, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || strings.ContainsAny(s, ".eE\"") || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		return 0, fmt.Errorf("%s is not an integer", short(raw))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || int64(int(v)) != v {
		return 0, fmt.Errorf("%s is not an integer in range", short(raw))
	}
	return int(v), nil
}

// short quotes at most 40 bytes of raw JSON for an error message.
func short(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
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
	d := &detector{m: m, tensors: m.Tensors(), seen: map[string]bool{}}
	if err := d.markers(); err != nil {
		return nil, err
	}
	if err := d.metadataLayers(); err != nil {
		return nil, err
	}
	if err := d.scaledFP8(); err != nil {
		return nil, err
	}
	// File order of the weight; an unsupported module without one sorts by
	// its marker, or last.
	pos := func(mod *Module) int {
		for _, n := range []string{mod.Name + ".weight", mod.Marker.Name} {
			if i, ok := d.byName[n]; ok {
				return i
			}
		}
		return len(d.tensors)
	}
	sort.SliceStable(d.mods, func(i, j int) bool { return pos(&d.mods[i]) < pos(&d.mods[j]) })
	return d.mods, nil
}

// detector is one Detect in progress.
type detector struct {
	m       formats.Model
	tensors []formats.Tensor
	// byName indexes tensors, built on the first lookup: a model with no
	// quantized module (most of them) never needs one.
	byName map[string]int
	seen   map[string]bool // modules found, by name
	mods   []Module
}

// find looks a tensor up by name.
func (d *detector) find(name string) (formats.Tensor, bool) {
	if d.byName == nil {
		d.byName = make(map[string]int, len(d.tensors))
		for i, t := range d.tensors {
			d.byName[t.Name] = i
		}
	}
	if i, ok := d.byName[name]; ok {
		return d.tensors[i], true
	}
	return formats.Tensor{}, false
}

// add checks a module and its tensors and keeps it.
func (d *detector) add(mod Module) error {
	if err := complete(d.m, &mod, d.find); err != nil {
		return err
	}
	d.seen[mod.Name] = true
	d.mods = append(d.mods, mod)
	return nil
}

// unsupported keeps a module whose format this package cannot decode.
func (d *detector) unsupported(mod Module) {
	mod.Unsupported = true
	d.seen[mod.Name] = true
	d.mods = append(d.mods, mod)
}

// markers finds the modules with a comfy_quant marker tensor.
func (d *detector) markers() error {
	for i := range d.tensors {
		t := &d.tensors[i]
		name, ok := strings.CutSuffix(t.Name, MarkerSuffix)
		if !ok || name == "" || strings.HasSuffix(name, ".weight") {
			continue
		}
		c, err := readMarker(d.m, t)
		if errors.Is(err, ErrUnsupportedFormat) {
			d.unsupported(Module{Name: name, Config: c, Source: SourceMarker, Marker: *t})
			continue
		}
		if err != nil {
			return err
		}
		if err := d.add(Module{Name: name, Config: c, Source: SourceMarker, Marker: *t}); err != nil {
			return err
		}
	}
	return nil
}

// metadataLayers finds the modules of the _quantization_metadata entry
// that have no marker.
func (d *detector) metadataLayers() error {
	meta, ok := d.m.Metadata().String(SourceMetadata)
	if !ok {
		return nil
	}
	layers, err := metadataLayers(meta)
	if err != nil {
		return fmt.Errorf("%s: metadata %q: %w", d.m.Path(), SourceMetadata, err)
	}
	for _, name := range sortedKeys(layers) {
		if d.seen[name] {
			continue
		}
		c, err := ParseQuantConfig(layers[name])
		if errors.Is(err, ErrUnsupportedFormat) {
			d.unsupported(Module{Name: name, Config: c, Source: SourceMetadata})
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: metadata %q: layer %q: %w", d.m.Path(), SourceMetadata, name, err)
		}
		if err := d.add(Module{Name: name, Config: c, Source: SourceMetadata}); err != nil {
			return err
		}
	}
	return nil
}

// scaledFP8 finds, when a "scaled_fp8" tensor is present, the legacy
// <m>.scale_weight layers whose weight is FP8.
func (d *detector) scaledFP8() error {
	if !slices.ContainsFunc(d.tensors, func(t formats.Tensor) bool { return t.Name == "scaled_fp8" }) {
		return nil
	}
	for _, t := range d.tensors {
		name, ok := strings.CutSuffix(t.Name, ".scale_weight")
		if !ok || d.seen[name] {
			continue
		}
		w, ok := d.find(name + ".weight")
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
		if err := d.add(Module{Name: name, Config: c, Source: SourceScaledFP8}); err != nil {
			return err
		}
	}
	return nil
}

// readMarker reads and parses a comfy_quant tensor.
func readMarker(m formats.Model, t *formats.Tensor) (QuantConfig, error) {
	file := fileOf(m, t)
	if t.Type != formats.U8 && t.Type != formats.I8 {
		return QuantConfig{}, moduleError(file, t.Name, fmt.Sprintf("a comfy_quant marker must be U8, not %s", t.Type))
	}
	if len(t.Shape) != 1 {
		return QuantConfig{}, moduleError(file, t.Name, fmt.Sprintf("a comfy_quant marker must be 1-D, not shape %v", t.Shape))
	}
	if t.Size > MaxMarkerSize || t.Size != t.Shape[0] {
		return QuantConfig{}, moduleError(file, t.Name, fmt.Sprintf("marker of %d bytes (at most %d)", t.Size, MaxMarkerSize))
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

// moduleError reports a malformed module tensor; it wraps ErrConfig.
func moduleError(file, tensor, msg string) error {
	return &formats.FormatError{File: file, Tensor: tensor, Msg: msg, Err: ErrConfig}
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
		return moduleError(m.Path(), "", fmt.Sprintf("module %q (%s): no tensor %q", mod.Name, mod.Source, wname))
	}
	file := fileOf(m, &w)
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return moduleError(file, w.Name, fmt.Sprintf("shape %v is not a 2-D [out, in] weight", w.Shape))
	}
	out, in := w.Shape[0], w.Shape[1]
	want, _ := WeightType(mod.Config.Format)
	if w.Type != want {
		return moduleError(file, w.Name, fmt.Sprintf("format %s needs %s weights, not %s", mod.Config.Format, want, w.Type))
	}
	if mod.Config.Convrot && in%int64(mod.Config.GroupSize) != 0 {
		return moduleError(file, w.Name, fmt.Sprintf("row length %d is not divisible by convrot_groupsize %d", in, mod.Config.GroupSize))
	}
	switch mod.Config.Format {
	case FormatNVFP4, FormatMXFP8, FormatW4A4, FormatW4A8:
		mod.Weight = w
		if err := completeBlock(m, mod, find); err != nil {
			return err
		}
		if t, ok := find(mod.Name + ".input_scale"); ok {
			mod.InputScale = t
		}
		return nil
	}

	sname, iname := mod.Name+".weight_scale", mod.Name+".input_scale"
	if mod.Source == SourceScaledFP8 {
		sname, iname = mod.Name+".scale_weight", mod.Name+".scale_input"
	}
	s, ok := find(sname)
	if !ok {
		return moduleError(file, "", fmt.Sprintf("module %q (%s %s): no tensor %q", mod.Name, mod.Source, mod.Config.Format, sname))
	}
	sfile := fileOf(m, &s)
	switch s.Type {
	case formats.F32, formats.F16, formats.BF16:
	default:
		return moduleError(sfile, s.Name, fmt.Sprintf("scale type %s is not f32, f16 or bf16", s.Type))
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
		return moduleError(sfile, s.Name, fmt.Sprintf("scale shape %v for weight %v, want %s", s.Shape, w.Shape, what))
	}
	mod.Weight, mod.Scale = w, s
	if t, ok := find(iname); ok {
		mod.InputScale = t
	}
	return nil
}
