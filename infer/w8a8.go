package infer

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// ComfyUI modules as the runtimes compute them.
//
// INT8 (int8_tensorwise, with or without convrot): stable-diffusion.cpp
// (97d2990, docs/int8_convrot.md and its CPU kernels) and ComfyUI's INT8
// kernels both quantize each activation row at run time: rotate each group
// of the row by the Hadamard transform (convrot), one scale absmax/127 per
// row, codes rounded half to even and clamped to ±127, then INT8 x INT8 dot
// products into INT32, rescaled by both scales, bias added last. An
// activation that several modules read is quantized once. generate runs the
// same arithmetic (native.QuantizeActivations, native.MulMatI8), so that
// --compare measures what the runtime will render rather than the better
// figure of a float product with dequantized weights.
//
// FP8 (float8_e4m3fn/e5m2 with weight_scale): neither runtime quantizes
// activations on a CPU. ComfyUI quantizes them (per tensor, input_scale
// when present) only on GPUs with FP8 matrix units; elsewhere it disables
// its FP8 kernels and multiplies in float with the weight times its scale.
// stable-diffusion.cpp loads FP8 tensors as F16 and reads a weight_scale
// only for the linear layers that declare one (a few DiT families), so for
// a UNet's layers it multiplies by the unscaled codes: such a file renders
// wrong in sd-cli. RuntimeSDCPP reproduces that, RuntimeComfyUI applies the
// scale.

//
// asym_w4a8_int8: ComfyUI widens the 4-bit codes to their INT8 grid
// (clamp(round(codebook·relative scale), ±127)) and runs the INT8 convrot
// product above with weight_s_channel as the row scales; convrot_w4a4: it
// rotates each activation row and quantizes it to int4 (absmax/7, codes in
// ±7), and multiplies the int4 codes exactly, which is the same product
// with codes in ±7. RuntimeComfyUI does both. nvfp4 and mxfp8 are
// dequantized, as ComfyUI on CPU does.

// FP8ScaleIgnored reports whether rt multiplies FP8 modules' codes without
// their weight scale (stable-diffusion.cpp's UNet and text encoder layers).
func FP8ScaleIgnored(rt string) bool { return rt == "" || rt == RuntimeSDCPP }

// checkRuntime validates LoadOptions.Runtime.
func checkRuntime(rt string) error {
	switch rt {
	case "", RuntimeSDCPP, RuntimeComfyUI:
		return nil
	}
	return fmt.Errorf("unknown runtime %q (want %s or %s)", rt, RuntimeSDCPP, RuntimeComfyUI)
}

// gathered lists the suffixes of 2-D weights that graphs read by rows
// (get_rows) rather than multiply: an INT8 module there is dequantized, as
// the runtimes' embedding layers do.
var gathered = []string{"token_embedding.weight", "position_embedding.weight"}

// runtimeModule types a ComfyUI module's weight the way runtime rt holds
// it; for an INT8 module it returns the spec of the module's scales too.
func runtimeModule(ws *WeightSpec, rt string) (WeightSpec, bool) {
	s := ws.Src
	if s.Module == nil || s.Module.Unsupported || s.Err() != nil || ws.Transpose || len(ws.Shape) != 2 ||
		!strings.HasSuffix(ws.Name, ".weight") {
		return WeightSpec{}, false
	}
	for _, suf := range gathered {
		if strings.HasSuffix(ws.Name, suf) {
			return WeightSpec{}, false
		}
	}
	mod := s.Module
	switch {
	case mod.Config.Format == comfyquant.FormatInt8 && mod.Weight.Type == formats.I8 && !mod.Config.FullPrecisionMatMul:
		group := 0
		if mod.Config.Convrot {
			group = mod.Config.GroupSize
		}
		if group > native.MaxW8A8Group || (group > 0 && ws.Shape[1]%int64(group) != 0) {
			return WeightSpec{}, false // the float product, as decoded
		}
		ws.Type, ws.w8a8, ws.group = formats.I8, true, group
		scale := WeightSpec{Name: strings.TrimSuffix(ws.Name, ".weight") + ".weight_scale", Type: formats.F32,
			Shape: []int64{ws.Shape[0]}, Component: ws.Component, Src: s, model: ws.model, scaleOf: mod}
		return scale, true
	case mod.Config.Format == comfyquant.FormatW4A8 && rt == RuntimeComfyUI && mod.Correction.Name == "" &&
		!mod.Config.FullPrecisionMatMul && mod.Config.GroupSize <= native.MaxW8A8Group:
		// ComfyUI widens the 4-bit codes to their INT8 grid and runs the
		// INT8 convrot product with the channel scales (comfy-kitchen's
		// w4a8_int8_linear): the W8A8 path above, codes built on load.
		ws.Type, ws.w8a8, ws.group = formats.I8, true, mod.Config.GroupSize
		scale := WeightSpec{Name: strings.TrimSuffix(ws.Name, ".weight") + ".weight_scale", Type: formats.F32,
			Shape: []int64{ws.Shape[0]}, Component: ws.Component, Src: s, model: ws.model, scaleOf: mod}
		return scale, true
	case mod.Config.Format == comfyquant.FormatW4A4 && rt == RuntimeComfyUI && !mod.Config.FullPrecisionMatMul &&
		mod.Config.GroupSize <= native.MaxW8A8Group:
		// comfy-kitchen's eager convrot_w4a4_linear rotates each activation
		// row, quantizes it to int4 (absmax/7) and multiplies the int4 codes
		// exactly: the W8A8 product with codes in ±7 on both sides.
		ws.Type, ws.w8a8, ws.group, ws.actLevels = formats.I8, true, mod.Config.GroupSize, convrot.Int4Max
		scale := WeightSpec{Name: strings.TrimSuffix(ws.Name, ".weight") + ".weight_scale", Type: formats.F32,
			Shape: []int64{ws.Shape[0]}, Component: ws.Component, Src: s, model: ws.model, scaleOf: mod}
		return scale, true
	case (mod.Config.Format == comfyquant.FormatFP8E4M3 || mod.Config.Format == comfyquant.FormatFP8E5M2) && FP8ScaleIgnored(rt):
		ws.unscaledFP8 = true
	}
	return WeightSpec{}, false
}

// streamScale writes an INT8 module's row scales as F32 [out]; a
// tensor-wise scale is repeated for every row.
func (w *WeightSpec) streamScale(put func(data []byte, off int64) error) error {
	mod := w.scaleOf
	st := mod.Scale
	if mod.Config.Format == comfyquant.FormatW4A8 {
		st = mod.Scale2 // weight_s_channel
	}
	raw, err := formats.ReadTensor(w.model, &st)
	if err != nil {
		return err
	}
	scales := make([]float32, st.Elements())
	if err := quant.DecodeFloats(st.Type, scales, raw); err != nil {
		return fmt.Errorf("%s: tensor %q: %w", w.model.Path(), st.Name, err)
	}
	rows := int(w.Shape[0])
	if len(scales) == 1 && rows != 1 {
		one := scales[0]
		scales = make([]float32, rows)
		for i := range scales {
			scales[i] = one
		}
	}
	if len(scales) != rows {
		return fmt.Errorf("%s: tensor %q: %d scales for %d rows", w.model.Path(), st.Name, len(scales), rows)
	}
	out := make([]byte, 4*rows)
	enc, err := quant.Encoder(formats.F32)
	if err != nil {
		return err
	}
	enc.Quantize(out, scales, nil)
	return put(out, 0)
}

// streamUnscaled writes an FP8 module's codes as F16 without its scale.
func (w *WeightSpec) streamUnscaled(scratch *tensor.Scratch, put func(data []byte, off int64) error) error {
	t := &w.Src.Module.Weight
	dec, err := quant.Decoder(t.Type)
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %w", w.model.Path(), t.Name, err)
	}
	enc, err := quant.Encoder(w.Type)
	if err != nil {
		return err
	}
	esize := int64(w.Type.Info().BlockBytes)
	for off := int64(0); off < t.Size; off += loadChunk {
		n := min(loadChunk, t.Size-off) // one byte per element
		raw := scratch.Bytes(0, int(n))
		if err := formats.ReadFull(w.model, t, raw, off); err != nil {
			return err
		}
		f := scratch.Float32s(0, int(n))
		dec.Dequantize(f, raw)
		out := scratch.Bytes(1, int(n*esize))
		enc.Quantize(out, f, nil)
		if err := put(out, off*esize); err != nil {
			return err
		}
	}
	return nil
}

// actKey names one quantized activation: the tensor, the rotation group
// and the code range (0: ±127).
type actKey struct {
	x      native.Tensor
	group  int
	levels int
}

// linearW8A8 applies the INT8 module prefix to x [in, L, ...] as W8A8; the
// quantized activation is shared by every module that reads x with the
// same group (attention's q, k and v), as stable-diffusion.cpp shares it.
func (g *Builder) linearW8A8(x native.Tensor, prefix string, group int) native.Tensor {
	w := g.Weight(prefix + ".weight")
	scale := g.Weight(prefix + ".weight_scale")
	var bias native.Tensor
	if g.Has(prefix + ".bias") {
		bias = g.Weight(prefix + ".bias")
	}
	if x.Type() != formats.F32 {
		x = g.Ctx.Cast(x, formats.F32)
	}
	if !x.Contiguous() {
		x = g.Ctx.Cont(x)
	}
	levels := g.Weights.actLevels[prefix+".weight"]
	key := actKey{x, group, levels}
	xq, ok := g.acts[key]
	if !ok {
		if levels != 0 {
			xq = g.Ctx.QuantizeActivationsLevels(x, group, levels)
		} else {
			xq = g.Ctx.QuantizeActivations(x, group)
		}
		if g.acts == nil {
			g.acts = map[actKey]native.Tensor{}
		}
		g.acts[key] = xq
	}
	return g.Ctx.MulMatI8(w, xq, scale, bias)
}

// streamInt4 writes a packed 4-bit module's weight as the INT8 codes
// ComfyUI multiplies ([out, in], one byte each), in chunks of rows: the
// signed nibbles of convrot_w4a4, the widened grid of asym_w4a8_int8.
func (w *WeightSpec) streamInt4(scratch *tensor.Scratch, put func(data []byte, off int64) error) error {
	mod := w.Src.Module
	out, in := w.Shape[0], w.Shape[1]
	gs := int64(mod.Config.QuantGroupSize)
	var sRel []byte
	var err error
	if mod.Config.Format == comfyquant.FormatW4A8 {
		if sRel, err = formats.ReadTensor(w.model, &mod.Scale); err != nil {
			return err
		}
	}
	var codebook []float32
	if mod.Codebook.Name != "" {
		raw, err := formats.ReadTensor(w.model, &mod.Codebook)
		if err != nil {
			return err
		}
		codebook = make([]float32, 16)
		if err := quant.DecodeFloats(mod.Codebook.Type, codebook, raw); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", w.model.Path(), mod.Codebook.Name, err)
		}
	}
	rows := max(1, loadChunk/in)
	for r0 := int64(0); r0 < out; r0 += rows {
		n := min(rows, out-r0)
		packed := scratch.Bytes(0, int(n*in/2))
		if err := formats.ReadFull(w.model, &mod.Weight, packed, r0*in/2); err != nil {
			return err
		}
		codes := scratch.Bytes(1, int(n*in))
		for r := range n {
			dst, src := codes[r*in:(r+1)*in], packed[r*in/2:(r+1)*in/2]
			if sRel == nil {
				convrot.W4A4Int8Row(dst, src)
				continue
			}
			if err := convrot.W4A8Int8Row(dst, src, sRel[(r0+r)*in/gs:(r0+r+1)*in/gs], codebook, int(gs)); err != nil {
				return fmt.Errorf("%s: tensor %q: row %d: %w", w.model.Path(), mod.Weight.Name, r0+r, err)
			}
		}
		if err := put(codes, r0*in); err != nil {
			return err
		}
	}
	return nil
}
