package lora

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/quant"
)

// memModel is a formats.Model held in memory. Tensors added without data
// read as zeros, so full-size tensor lists cost nothing.
type memModel struct {
	path string
	list []formats.Tensor
	data map[string][]byte
}

func newMem(path string) *memModel { return &memModel{path: path, data: map[string][]byte{}} }

func (m *memModel) Path() string { return m.path }
func (m *memModel) Info() formats.Info {
	return formats.Info{Format: "memory", Files: []string{m.path}}
}
func (m *memModel) Tensors() []formats.Tensor  { return m.list }
func (m *memModel) Metadata() formats.Metadata { return nil }
func (m *memModel) Close() error               { return nil }
func (m *memModel) find(name string) *formats.Tensor {
	for i := range m.list {
		if m.list[i].Name == name {
			return &m.list[i]
		}
	}
	return nil
}

func (m *memModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > t.Size {
		return 0, fmt.Errorf("read past tensor %q", t.Name)
	}
	d := m.data[t.Name]
	if d == nil {
		clear(p)
		return len(p), nil
	}
	return copy(p, d[off:]), nil
}

// add stores a tensor; vals nil leaves it zero.
func (m *memModel) add(name string, dt formats.DType, shape []int64, vals []float32) {
	size, err := dt.Bytes(shape)
	if err != nil {
		panic(err)
	}
	m.list = append(m.list, formats.Tensor{Name: name, Type: dt, Shape: append([]int64{}, shape...), File: m.path, Size: size})
	if vals != nil {
		m.data[name] = encode(dt, vals)
	}
}

func encode(dt formats.DType, vals []float32) []byte {
	switch dt {
	case formats.F32:
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	case formats.F16:
		b := make([]byte, 2*len(vals))
		quant.F32ToF16Row(b, vals)
		return b
	case formats.BF16:
		b := make([]byte, 2*len(vals))
		quant.F32ToBF16Row(b, vals)
		return b
	}
	panic("encode: " + dt.String())
}

// decodeAll reads a stored tensor back as float32 (what the package sees).
func decodeAll(t *testing.T, m formats.Model, name string) []float32 {
	t.Helper()
	tt, ok := formats.Find(m, name)
	if !ok {
		t.Fatalf("no tensor %q", name)
	}
	v, err := readFloats(m, &tt)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func randn(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// --- base models by name ---

func synthBase(t *testing.T, arch, prefix string) []formats.Tensor {
	t.Helper()
	d, err := synth.Descriptors(synth.Spec{Arch: arch, DType: formats.F16})
	if err != nil {
		t.Fatal(err)
	}
	if prefix != "" {
		for i := range d {
			d[i].Name = prefix + d[i].Name
		}
	}
	return d
}

type nameShapes []formats.Tensor

func (l *nameShapes) add(name string, shape ...int64) {
	*l = append(*l, formats.Tensor{Name: name, Type: formats.F16, Shape: shape})
}

func (l *nameShapes) linear(name string, out, in int64) {
	l.add(name+".weight", out, in)
	l.add(name+".bias", out)
}

// wan14B lists the Wan 2.1 14B DiT's block tensors (original names, as a
// ComfyUI file stores them under model.diffusion_model.); i2v adds the
// image cross-attention of the image-to-video model.
func wan14B(i2v bool) []formats.Tensor {
	const d, ffn = 5120, 13824
	var l nameShapes
	in := int64(16)
	if i2v {
		// Wan 2.1 I2V: 36 input channels and the CLIP image embedding.
		in = 36
		l.linear("model.diffusion_model.img_emb.proj.1", d, 1280)
	}
	l.add("model.diffusion_model.patch_embedding.weight", d, in, 1, 2, 2)
	l.linear("model.diffusion_model.text_embedding.0", d, 4096)
	l.linear("model.diffusion_model.time_projection.1", 6*d, d)
	for i := 0; i < 40; i++ {
		p := fmt.Sprintf("model.diffusion_model.blocks.%d.", i)
		l.add(p+"modulation", 1, 6, d)
		for _, a := range []string{"self_attn", "cross_attn"} {
			for _, n := range []string{"q", "k", "v", "o"} {
				l.linear(p+a+"."+n, d, d)
			}
			l.add(p+a+".norm_q.weight", d)
			l.add(p+a+".norm_k.weight", d)
		}
		if i2v {
			l.linear(p+"cross_attn.k_img", d, d)
			l.linear(p+"cross_attn.v_img", d, d)
			l.add(p+"cross_attn.norm_k_img.weight", d)
		}
		l.add(p+"norm3.weight", d)
		l.add(p+"norm3.bias", d)
		l.linear(p+"ffn.0", ffn, d)
		l.linear(p+"ffn.2", d, ffn)
	}
	l.linear("model.diffusion_model.head.head", 64, d)
	return l
}

// fluxDiffusers lists a diffusers FluxTransformer2DModel's tensors as a
// diffusers-format transformer file stores them (no prefix).
func fluxDiffusers(doubles, singles int) []formats.Tensor {
	const h, mlp = 3072, 12288
	var l nameShapes
	l.linear("x_embedder", h, 64)
	l.linear("context_embedder", h, 4096)
	for i := 0; i < doubles; i++ {
		p := fmt.Sprintf("transformer_blocks.%d.", i)
		l.linear(p+"norm1.linear", 6*h, h)
		l.linear(p+"norm1_context.linear", 6*h, h)
		for _, n := range []string{"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"} {
			l.linear(p+"attn."+n, h, h)
		}
		l.linear(p+"ff.net.0.proj", mlp, h)
		l.linear(p+"ff.net.2", h, mlp)
		l.linear(p+"ff_context.net.0.proj", mlp, h)
		l.linear(p+"ff_context.net.2", h, mlp)
	}
	for i := 0; i < singles; i++ {
		p := fmt.Sprintf("single_transformer_blocks.%d.", i)
		l.linear(p+"norm.linear", 3*h, h)
		for _, n := range []string{"to_q", "to_k", "to_v"} {
			l.linear(p+"attn."+n, h, h)
		}
		l.linear(p+"proj_mlp", mlp, h)
		l.linear(p+"proj_out", h, h+mlp)
	}
	return l
}

// diffusersFolder lists an SD 1.x or SDXL checkpoint as a diffusers folder
// holds it, with the prefixes sd.cpp's diffusers loader gives each
// component (unet., te., te.1.): the UNet renamed by the inverse of
// sd.cpp's conversion, CLIP-L as is, and CLIP-G (SDXL) with the separate
// q/k/v projections of Hugging Face's CLIPTextModelWithProjection instead
// of open_clip's fused in_proj.
func diffusersFolder(t *testing.T, arch string, v names.Version) []formats.Tensor {
	t.Helper()
	var out nameShapes
	for _, tt := range synthBase(t, arch, "") {
		switch {
		case strings.HasPrefix(tt.Name, "model.diffusion_model."):
			d, ok := names.DiffusersUNetName(strings.TrimPrefix(tt.Name, "model.diffusion_model."), v)
			if !ok {
				t.Fatalf("no diffusers name for %s", tt.Name)
			}
			out.add("unet."+d, tt.Shape...)
		case strings.HasPrefix(tt.Name, "cond_stage_model.transformer.text_model."):
			out.add("te."+strings.TrimPrefix(tt.Name, "cond_stage_model.transformer."), tt.Shape...)
		case strings.HasPrefix(tt.Name, "conditioner.embedders.0.transformer.text_model."):
			out.add("te."+strings.TrimPrefix(tt.Name, "conditioner.embedders.0.transformer."), tt.Shape...)
		}
	}
	if v.IsSDXL() {
		const h, ff = 1280, 5120
		for i := 0; i < 32; i++ {
			p := fmt.Sprintf("te.1.text_model.encoder.layers.%d.", i)
			for _, n := range []string{"q_proj", "k_proj", "v_proj", "out_proj"} {
				out.linear(p+"self_attn."+n, h, h)
			}
			out.linear(p+"mlp.fc1", ff, h)
			out.linear(p+"mlp.fc2", h, ff)
			out.add(p+"layer_norm1.weight", h)
			out.add(p+"layer_norm2.weight", h)
		}
	}
	return out
}

// testBase builds a base by the name the key lists use.
func testBase(t *testing.T, name string) *Base {
	t.Helper()
	var tensors []formats.Tensor
	switch name {
	case "sd1":
		tensors = synthBase(t, "sd1", "")
	case "sdxl":
		tensors = synthBase(t, "sdxl", "")
	case "sd1_diffusers":
		tensors = diffusersFolder(t, "sd1", names.SD1)
	case "sdxl_diffusers":
		tensors = diffusersFolder(t, "sdxl", names.SDXL)
	case "flux":
		tensors = synthBase(t, "flux", "")
	case "flux_clip":
		tensors = append(synthBase(t, "flux", "model.diffusion_model."), synthBase(t, "clip_l", "text_encoders.clip_l.transformer.")...)
	case "flux_diffusers":
		tensors = fluxDiffusers(19, 38)
	case "wan14b":
		tensors = wan14B(false)
	case "wan14b_i2v":
		tensors = wan14B(true)
	default:
		t.Fatalf("unknown base %q", name)
	}
	v, prefix := DetectBase(tensors)
	if strings.HasPrefix(name, "flux") && !v.IsFlux() || strings.HasPrefix(name, "wan") && v != names.Wan2 ||
		strings.HasPrefix(name, "sdxl") && v != names.SDXL || strings.HasPrefix(name, "sd1") && v != names.SD1 {
		t.Fatalf("base %s detected as %v", name, v)
	}
	b, err := NewBase(tensors, v, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
