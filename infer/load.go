package infer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// Weight loading: every tensor of the component files that a graph reads is
// renamed to sd.cpp's internal (LDM) name the way sd-cli does it (the
// component's load prefix, then names.Convert with the version detected over
// all files together), so original checkpoints, ComfyUI and diffusers names,
// standalone components and sd-cli convert outputs all load. Then each gets
// the type ggml computes with:
//
//   - ggml types are kept as stored where ggml can use them: weights of a
//     matrix product in any type the linked ggml knows;
//   - norm scales, biases and embeddings added elementwise become F32
//     (ggml adds and multiplies only float operands);
//   - conv kernels become F16 unless stored as F16 or F32 (ggml's im2col
//     takes the kernel's type), which also covers ComfyUI-GGUF's quantized
//     kernels stored as rows with comfy.gguf.orig_shape;
//   - F8 becomes F16 and F64 F32 (as sd.cpp holds them), I64 becomes I32;
//   - ComfyUI INT8 modules (int8_tensorwise, with or without convrot) keep
//     their I8 codes and F32 row scales and run as W8A8 (w8a8.go), as both
//     runtimes run them; FP8 modules are decoded to F16 with their weight
//     scale (ComfyUI) or without it (stable-diffusion.cpp), by Runtime;
//   - ggml ids 40..42 (nvfp4, q1_0, q2_0), which the linked ggml lacks,
//     are refused.
//
// Layouts that differ between naming schemes are normalised by the layout
// table (OpenCLIP's text_projection is the transpose of Hugging Face's).

// ErrNewerType is wrapped by errors about tensor types the linked ggml does not know.
var ErrNewerType = errors.New("type is newer than the linked ggml")

// Components names a model's files by the flags of the input table
// (family.Inputs: "model", "diffusion-model", "clip_l", "vae", ...).
// Any mix is allowed: a standalone component replaces the same part of the
// whole model. Empty paths count as unset.
type Components map[string]string

// Files lists the components that are set, as "flag=path", in load order.
func (c Components) Files() []string {
	var out []string
	for _, ct := range family.GenerateInputs() {
		if p := c[ct.Flag]; p != "" {
			out = append(out, ct.Flag+"="+p)
		}
	}
	return out
}

// Main returns the file that names the model: the first primary component
// set (-m, else --diffusion-model), else the first component set.
func (c Components) Main() string {
	for _, primary := range []bool{true, false} {
		for _, ct := range family.GenerateInputs() {
			if p := c[ct.Flag]; p != "" && (ct.Primary || !primary) {
				return p
			}
		}
	}
	return ""
}

// HasPrimary reports whether a primary component (one that names the model) is set.
func (c Components) HasPrimary() bool {
	for _, ct := range family.GenerateInputs() {
		if ct.Primary && c[ct.Flag] != "" {
			return true
		}
	}
	return false
}

// Empty reports whether no component is set.
func (c Components) Empty() bool {
	for _, p := range c {
		if p != "" {
			return false
		}
	}
	return true
}

// WithDefaults returns c with every unset component taken from d (a
// reference model defaults to the tested model's other files).
func (c Components) WithDefaults(d Components) Components {
	out := Components{}
	for k, v := range d {
		if v != "" {
			out[k] = v
		}
	}
	for k, v := range c {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// VAEPrefix gives a standalone VAE file's names the load prefix (--vae).
func VAEPrefix(name string) string { return family.InputByFlag(family.FlagVAE).LoadName(name) }

// OpenSource is one opened component file.
type OpenSource struct {
	// Comp is the input-table row of the file's flag.
	Comp *family.Input
	// M is the opened file.
	M  formats.Model
	dq *tensor.View
}

// loadVersion names the version whose name conversion fits the loaded
// tensors: the one sd.cpp's detection gives, else, for a model sd.cpp cannot
// place, the main family's own (sd.cpp looks for a UNet's text encoders
// under their checkpoint prefixes, so a UNet given as --diffusion-model with
// --clip_l and --clip_g files is of no version there and sd-cli refuses
// it). Both are columns of the family table.
func loadVersion(tensors []formats.Tensor) names.Version {
	arch := family.Detect(tensors, nil)
	if v := names.VersionOf(arch); v != names.Unknown {
		return v
	}
	if v := names.Lookup(arch.SDCppModel()); v != names.Unknown {
		return v
	}
	if f := arch.Main(); f != nil && f.Kind == family.KindDiffusion {
		// A variant sd.cpp has no version for (the SDXL refiner) has its
		// family's names.
		return names.Lookup(f.SDCpp)
	}
	return names.Unknown
}

// convertPrefixes rename a name's prefix after version detection and before
// names.Convert, where sd.cpp's own mapping loses a part: its diffusers
// loader names text_encoder_2 "te.1.", which sd.cpp's "te." rule turns into
// cond_stage_model.transformer.1. (so sd-cli reads no second SDXL encoder
// from a diffusers folder); "te2." names it as the conditioner reads it.
var convertPrefixes = []struct{ from, to string }{{"te.1.", "te2."}}

// ConvertName returns the internal (sd.cpp) name of the load name load of a
// model of version v.
func ConvertName(load string, v names.Version) string {
	for _, r := range convertPrefixes {
		if rest, ok := strings.CutPrefix(load, r.from); ok {
			load = r.to + rest
			break
		}
	}
	return names.Convert(load, v)
}

// layoutRule rewrites a weight's storage layout at load: a tensor whose
// internal name ends with suffix and whose name in the file does not end with
// fileSuffix is stored transposed.
type layoutRule struct {
	suffix     string
	fileSuffix string
}

// layoutRules: OpenCLIP's text_projection is a [width, embed] parameter used
// as x @ P (sgm's FrozenOpenCLIPEmbedder2), Hugging Face's a Linear weight
// [embed, width] (W x); both load as the Linear form. stable-diffusion.cpp
// multiplies by the stored matrix either way, so its pooled SDXL embedding
// from a single-file (LDM) checkpoint uses the transpose;
// LoadOptions.StoredLayout reproduces that.
var layoutRules = []layoutRule{{suffix: "text_model.text_projection", fileSuffix: ".weight"}}

// transposedAtLoad reports whether the weight internal (file name file) is held transposed.
func transposedAtLoad(internal, file string) bool {
	for _, r := range layoutRules {
		if strings.HasSuffix(internal, r.suffix) && !strings.HasSuffix(file, r.fileSuffix) {
			return true
		}
	}
	return false
}

// WeightSpec is one weight as inference holds it.
type WeightSpec struct {
	// Name is the internal name the graphs look up.
	Name string
	// Type is the type held in ggml.
	Type formats.DType
	// Shape is the logical shape in PyTorch order (after any layout rule).
	Shape []int64
	// Component is the sd-cli flag of the file it came from ("model", "clip_g", ...).
	Component string
	// Transpose holds a 2-D tensor transposed (layoutRules).
	Transpose bool
	// Src reads the tensor's data from its file.
	Src   *tensor.Source
	model formats.Model
	// w8a8 marks an INT8 module's weight held as its stored I8 codes, run
	// as W8A8 with rotation group group (0: none); scaleOf marks the F32
	// [out] weight scales of that module, a tensor of its own.
	w8a8    bool
	group   int
	scaleOf *comfyquant.Module
	// actLevels is the code range of the W8A8 activations when it is not
	// ±127 (7: convrot_w4a4), else 0.
	actLevels int
	// unscaledFP8 holds an FP8 module's codes without its weight scale,
	// as stable-diffusion.cpp does (Runtime).
	unscaledFP8 bool
}

// SelectWeights lists the weights of one model file that the graphs use,
// renamed and typed as described above. rename, when not nil, runs before
// names.Convert (a standalone VAE file gets its prefix there).
func SelectWeights(m formats.Model, rename func(string) string) ([]WeightSpec, error) {
	src, err := NewSource(family.InputByFlag(family.FlagModel), m)
	if err != nil {
		return nil, err
	}
	return SelectFrom([]*OpenSource{src}, rename, LoadOptions{})
}

// NewSource wraps the opened file m of the input ct, refusing tensor types
// the linked ggml is older than.
func NewSource(ct *family.Input, m formats.Model) (*OpenSource, error) {
	for _, t := range m.Tensors() {
		if t.Type.Info().Newer {
			return nil, fmt.Errorf("%s: tensor %q: %w: %s (ggml id %d) cannot be computed by this build's ggml; requantize it with `sdtool quantize` to a type such as q4_K or q8_0",
				t.File, t.Name, ErrNewerType, t.Type, uint16(t.Type))
		}
	}
	dq, err := tensor.NewView(m)
	if err != nil {
		return nil, err
	}
	return &OpenSource{Comp: ct, M: m, dq: dq}, nil
}

// SelectFrom renames the tensors of every source together (one detected
// version, as sd-cli's loader converts them), drops the parts of the -m file
// that a standalone component replaces and anything outside a component's
// part, and types what is left. override, when not nil, replaces the load
// prefixes (tests); opt.StoredLayout skips the layout table, and
// opt.Runtime decides how ComfyUI modules are held (runtimeModules).
func SelectFrom(srcs []*OpenSource, override func(string) string, opt LoadOptions) ([]WeightSpec, error) {
	stored := opt.StoredLayout
	type named struct {
		src  *OpenSource
		s    *tensor.Source
		load string
	}
	var all []named
	var tensors []formats.Tensor
	for _, src := range srcs {
		for _, s := range src.dq.Sources {
			load := src.Comp.LoadName(s.Name)
			if override != nil {
				load = override(s.Name)
			}
			all = append(all, named{src, s, load})
			t := s.Tensor
			t.Name = load
			tensors = append(tensors, t)
		}
	}
	v := loadVersion(tensors)
	replaced := func(name string, from *OpenSource) bool {
		for _, o := range srcs {
			if o != from && !o.Comp.Whole() && o.Comp.Provides(name) {
				return true
			}
		}
		return false
	}
	var out []WeightSpec
	seen := map[string]string{}
	for _, n := range all {
		name := ConvertName(n.load, v)
		if !used(name) {
			continue
		}
		if !n.src.Comp.Whole() && !n.src.Comp.Provides(name) {
			continue // a whole checkpoint given as one component: only that part is read
		}
		if n.src.Comp.Whole() && replaced(name, n.src) {
			continue
		}
		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("%s: tensors %q and %q both load as %q", n.src.M.Path(), prev, n.s.Name, name)
		}
		seen[name] = n.s.Name
		if !n.s.Float() && !isInt(n.s.Tensor.Type) && n.s.Module == nil {
			// Booleans and unsigned bytes are never weights; a graph that
			// needed one would report it missing.
			continue
		}
		ws := WeightSpec{Name: name, Shape: n.s.Shape(), Component: n.src.Comp.Flag, Src: n.s, model: n.src.M}
		if !stored && transposedAtLoad(name, n.s.Name) && len(ws.Shape) == 2 {
			ws.Transpose = true
			ws.Shape = []int64{ws.Shape[1], ws.Shape[0]}
		}
		var err error
		if ws.Type, err = heldType(name, n.s); err != nil {
			return nil, err
		}
		if ws.Transpose && ws.Type.Info().BlockSize != 1 {
			ws.Type = formats.F32
		}
		out = append(out, ws)
		if scale, ok := runtimeModule(&out[len(out)-1], opt.Runtime); ok {
			out = append(out, scale)
		}
	}
	return out, nil
}

func isInt(t formats.DType) bool {
	return t == formats.I64 || t == formats.I32 || t == formats.I16 || t == formats.I8
}

// FoldDims holds a tensor of more than four dimensions (a Conv3d kernel
// [out, in, kt, kh, kw]) in four by merging its leading ones, as sd.cpp
// holds a Conv3d kernel ([out·in, kt, kh, kw]); the data's order is unchanged.
func FoldDims(shape []int64) []int64 {
	if len(shape) <= 4 {
		return shape
	}
	lead := int64(1)
	for _, d := range shape[:len(shape)-3] {
		lead *= d
	}
	return append([]int64{lead}, shape[len(shape)-3:]...)
}

// used reports whether a graph may read the weight: whether it belongs to
// the part of one of the input table's components.
func used(name string) bool {
	for _, in := range family.GenerateInputs() {
		if in.Provides(name) {
			return true
		}
	}
	return false
}

// heldType decides the type a weight is held in (see the comment at the top).
func heldType(name string, s *tensor.Source) (formats.DType, error) {
	t := s.Tensor.Type
	if err := s.Err(); err != nil {
		return 0, err
	}
	shape := s.Shape()
	if isInt(t) && s.Module == nil {
		return formats.I32, nil
	}
	if s.Module != nil {
		// A ComfyUI module decodes to floats and is held like an F8
		// tensor: F16 where a matrix product or conv reads it, else F32.
		t = formats.F8_E4M3
	}
	switch {
	case len(shape) >= 4 && !strings.HasSuffix(name, ".gamma"):
		// A conv kernel (Conv3d's is 5-D); a 4-D RMS norm gamma is a scale.
		if t == formats.F32 || t == formats.F16 {
			return t, nil
		}
		return formats.F16, nil
	case len(shape) == 2 && strings.HasSuffix(name, ".weight") && !strings.Contains(name, "position_embedding"):
		// A matrix-product weight (or the token embedding, read with get_rows).
		if t.InLinkedGGML() && (s.OrigShape == nil || s.OrigShape[len(s.OrigShape)-1] == s.Tensor.RowLength()) {
			return t, nil
		}
		if t.InLinkedGGML() && t.Info().BlockSize == 1 {
			return t, nil
		}
		if t == formats.F64 || t.Info().BlockSize > 1 {
			return formats.F32, nil
		}
		return formats.F16, nil
	}
	return formats.F32, nil
}

// loadChunk bounds the bytes (or elements) one step of streaming a weight into ggml holds in Go memory.
const loadChunk = 8 << 20

// stream writes the weight's data in its held type, in storage order, to
// put(data, offset) piece by piece, so that no tensor is ever held whole in
// Go memory (except transposed ones, which are small).
func (w *WeightSpec) stream(scratch *tensor.Scratch, put func(data []byte, off int64) error) error {
	s := w.Src
	t := &s.Tensor
	if w.scaleOf != nil {
		return w.streamScale(put)
	}
	if w.unscaledFP8 {
		return w.streamUnscaled(scratch, put)
	}
	if w.w8a8 && comfyquant.Packed(s.Module.Config.Format) {
		return w.streamInt4(scratch, put)
	}
	if w.direct() {
		for off := int64(0); off < t.Size; off += loadChunk {
			buf := scratch.Bytes(0, int(min(loadChunk, t.Size-off)))
			if err := formats.ReadFull(w.model, t, buf, off); err != nil {
				return err
			}
			if err := put(buf, off); err != nil {
				return err
			}
		}
		return nil
	}
	if w.Type == formats.I32 {
		data, err := w.readInts()
		if err != nil {
			return err
		}
		return put(data, 0)
	}
	enc, err := quant.Encoder(w.Type)
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %w", t.File, s.Name, err)
	}
	if w.Type.Info().BlockSize != 1 {
		return fmt.Errorf("%s: tensor %q: cannot convert to %s at load", t.File, s.Name, w.Type)
	}
	esize := int64(w.Type.Info().BlockBytes)
	n := s.Elements()
	if w.Transpose {
		f := make([]float32, n)
		if err := s.Read(f, 0, scratch); err != nil {
			return err
		}
		rows, cols := w.Shape[1], w.Shape[0] // stored [rows, cols], held [cols, rows]
		tr := make([]float32, n)
		for r := int64(0); r < rows; r++ {
			for c := int64(0); c < cols; c++ {
				tr[c*rows+r] = f[r*cols+c]
			}
		}
		out := make([]byte, n*esize)
		enc.Quantize(out, tr, nil)
		return put(out, 0)
	}
	step := int64(loadChunk / 4)
	for first := int64(0); first < n; first += step {
		k := min(step, n-first)
		f := scratch.Float32s(0, int(k))
		if err := s.Read(f, first, scratch); err != nil {
			return err
		}
		out := scratch.Bytes(1, int(k*esize))
		enc.Quantize(out, f, nil)
		if err := put(out, first*esize); err != nil {
			return err
		}
	}
	return nil
}

// direct reports whether the weight is held as stored, so that its bytes
// go to ggml unchanged (and a streamed read lands straight in ggml's buffer).
func (w *WeightSpec) direct() bool {
	s := w.Src
	if w.scaleOf != nil || w.unscaledFP8 || w.w8a8 && comfyquant.Packed(s.Module.Config.Format) {
		return false
	}
	return (s.Module == nil || w.w8a8) && s.Tensor.Type == w.Type && !w.Transpose
}

// readInto reads the weight's data in its held type into dst, which has
// exactly its size: straight from the file when it is held as stored.
func (w *WeightSpec) readInto(dst []byte, scratch *tensor.Scratch) error {
	t := &w.Src.Tensor
	if w.direct() {
		if int64(len(dst)) != t.Size {
			return fmt.Errorf("%s: tensor %q: %d bytes stored, %d held", t.File, w.Src.Name, t.Size, len(dst))
		}
		return formats.ReadFull(w.model, t, dst, 0)
	}
	return w.stream(scratch, func(data []byte, off int64) error {
		if off+int64(len(data)) > int64(len(dst)) {
			return fmt.Errorf("%s: tensor %q: %d bytes at %d past its %d", t.File, w.Src.Name, len(data), off, len(dst))
		}
		copy(dst[off:], data)
		return nil
	})
}

// Read returns the weight's whole data in its held type (tests).
func (w *WeightSpec) Read(scratch *tensor.Scratch) ([]byte, error) {
	size, err := w.Type.Bytes(w.Shape)
	if err != nil {
		return nil, err
	}
	out := make([]byte, size)
	err = w.stream(scratch, func(data []byte, off int64) error {
		if off+int64(len(data)) > size {
			return fmt.Errorf("tensor %q: %d bytes at %d past %d", w.Name, len(data), off, size)
		}
		copy(out[off:], data)
		return nil
	})
	return out, err
}

// readInts narrows integer tensors to I32 with a truncating cast, as sd.cpp does for I64.
func (w *WeightSpec) readInts() ([]byte, error) {
	t := &w.Src.Tensor
	raw, err := formats.ReadTensor(w.model, t)
	if err != nil {
		return nil, err
	}
	n := int(t.Elements())
	out := make([]byte, 4*n)
	size := t.Type.Info().BlockBytes
	for i := range n {
		var v int64
		switch size {
		case 1:
			v = int64(int8(raw[i]))
		case 2:
			v = int64(int16(uint16(raw[2*i]) | uint16(raw[2*i+1])<<8))
		case 4:
			v = int64(int32(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24))
		default:
			for b := 7; b >= 0; b-- {
				v = v<<8 | int64(raw[8*i+b])
			}
		}
		u := uint32(int32(v))
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out, nil
}
