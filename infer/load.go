package infer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// Weight loading: every tensor of a formats.Model that the SD graphs read is
// renamed to sd.cpp's internal (LDM) name with names.Convert, the same
// mapping sd-cli applies at load, so original checkpoints, diffusers-named
// files and sd-cli convert outputs all load. Then each gets the type ggml
// computes with:
//
//   - ggml types are kept as stored where ggml can use them: weights of a
//     matrix product in any type the linked ggml knows;
//   - norm scales, biases and embeddings added elementwise become F32
//     (ggml adds and multiplies only float operands);
//   - conv kernels become F16 unless stored as F16 or F32 (ggml's im2col
//     takes the kernel's type), which also covers ComfyUI-GGUF's quantized
//     kernels stored as rows with comfy.gguf.orig_shape;
//   - F8 becomes F16 and F64 F32 (as sd.cpp holds them), I64 becomes I32,
//     and ComfyUI INT8 (convrot) and FP8 modules are dequantized to F16;
//   - ggml ids 40..42 (nvfp4, q1_0, q2_0), which the linked ggml lacks,
//     are refused.

// ErrNewerType is wrapped by errors about tensor types the linked ggml does not know.
var ErrNewerType = errors.New("type is newer than the linked ggml")

// usedPrefixes are the LDM name prefixes the SD 1.x/2.x graphs read.
var usedPrefixes = []string{"model.diffusion_model.", "first_stage_model.", "cond_stage_model."}

// weightSpec is one weight as inference holds it.
type weightSpec struct {
	// Name is the LDM name the graphs look up.
	Name string
	// Type is the type held in ggml.
	Type formats.DType
	// Shape is the logical shape in PyTorch order.
	Shape []int64
	src   *tensor.Source
	model formats.Model
}

// vaePrefix gives a standalone VAE file's names the first_stage_model.
// prefix (sd-cli's --vae adds "vae.", which names.Convert maps the same way).
func vaePrefix(name string) string {
	if strings.HasPrefix(name, "first_stage_model.") || strings.HasPrefix(name, "vae.") {
		return name
	}
	return "vae." + name
}

// selectWeights lists the weights of m that the graphs use, renamed and
// typed as described above. rename, when not nil, runs before names.Convert
// (a standalone VAE file gets its prefix there).
func selectWeights(m formats.Model, rename func(string) string) ([]weightSpec, error) {
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
	renamed := make([]string, len(dq.Sources))
	tensors := m.Tensors()
	if rename != nil {
		tensors = make([]formats.Tensor, len(dq.Sources))
		for i, s := range dq.Sources {
			renamed[i] = rename(s.Name)
			tensors[i] = s.Tensor
			tensors[i].Name = renamed[i]
		}
	} else {
		for i, s := range dq.Sources {
			renamed[i] = s.Name
		}
	}
	v := names.DetectVersion(tensors)
	var out []weightSpec
	seen := map[string]string{}
	for i, s := range dq.Sources {
		name := names.Convert(renamed[i], v)
		if !used(name) {
			continue
		}
		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("%s: tensors %q and %q both load as %q", m.Path(), prev, s.Name, name)
		}
		seen[name] = s.Name
		if !s.Float() && !isInt(s.Tensor.Type) && s.Module == nil {
			// Booleans and unsigned bytes are never SD weights; a graph that
			// needed one would report it missing.
			continue
		}
		ws := weightSpec{Name: name, Shape: s.Shape(), src: s, model: m}
		ws.Type, err = heldType(name, s)
		if err != nil {
			return nil, err
		}
		out = append(out, ws)
	}
	return out, nil
}

func isInt(t formats.DType) bool {
	return t == formats.I64 || t == formats.I32 || t == formats.I16 || t == formats.I8
}

func used(name string) bool {
	for _, p := range usedPrefixes {
		if strings.HasPrefix(name, p) {
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
	case len(shape) == 4:
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

// read returns the weight's data in its held type, in storage order.
func (w *weightSpec) read(scratch *tensor.Scratch) ([]byte, error) {
	s := w.src
	if s.Module == nil && s.Tensor.Type == w.Type {
		return formats.ReadTensor(w.model, &s.Tensor)
	}
	n := s.Elements()
	if w.Type == formats.I32 {
		return w.readInts()
	}
	f := scratch.Float32s(0, int(n))
	if err := s.Read(f, 0, scratch); err != nil {
		return nil, err
	}
	enc, err := quant.Encoder(w.Type)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", s.Tensor.File, s.Name, err)
	}
	size, err := w.Type.Bytes([]int64{n})
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w", s.Tensor.File, s.Name, err)
	}
	out := make([]byte, size)
	enc.Quantize(out, f, nil)
	return out, nil
}

// readInts narrows integer tensors to I32 with a truncating cast, as sd.cpp does for I64.
func (w *weightSpec) readInts() ([]byte, error) {
	t := &w.src.Tensor
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
