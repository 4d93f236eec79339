//go:build cgo

package flux

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/tensor"
)

// writeModules rewrites the tiny Flux DiT at src as F32 safetensors at dst
// with every linear weight of the blocks turned into a ComfyUI module by
// encode (which returns the module's extra tensors and their bytes, the
// weight first); other tensors become F32.
func writeModules(t *testing.T, src, dst string, encode func(name string, w []float32, out, in int64) ([]formats.Tensor, [][]byte)) {
	t.Helper()
	m, err := formats.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := tensor.NewView(m)
	if err != nil {
		t.Fatal(err)
	}
	var descs []formats.Tensor
	var data [][]byte
	for _, s := range v.Sources {
		f := make([]float32, s.Elements())
		if err := s.Read(f, 0, &tensor.Scratch{}); err != nil {
			t.Fatal(err)
		}
		shape := s.Shape()
		if len(shape) == 2 && strings.HasSuffix(s.Name, ".weight") && strings.Contains(s.Name, "blocks.") {
			ts, bs := encode(s.Name, f, shape[0], shape[1])
			descs, data = append(descs, ts...), append(data, bs...)
			continue
		}
		descs = append(descs, formats.Tensor{Name: s.Name, Type: formats.F32, Shape: shape})
		data = append(data, convrot.PutScales(nil, f))
	}
	c, _ := formats.CreatorNamed("safetensors")
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w, err := c.New(out, descs, formats.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range data {
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestComfyRuntimeInt4 checks how --runtime comfyui runs the 4-bit
// ConvRot formats against the INT8 path, which has its own tests: an
// asym_w4a8_int8 model renders exactly as the int8_convrot model holding
// its INT8 grid and channel scales (ComfyUI runs the one as the other); a
// convrot_w4a4 model, whose activations are int4, renders differently from
// the int8_convrot model holding the same codes and scales and from its own
// dequantized render (native's TestW8A8Levels checks the int4 arithmetic).
func TestComfyRuntimeInt4(t *testing.T) {
	longtest.Skip(t, "six tiny Flux renders (40 s on a busy 2-core machine)")
	_, parts := writeTinyFlux(t)
	dir := t.TempDir()
	marker := func(name string, c comfyquant.QuantConfig) (formats.Tensor, []byte) {
		b, _ := comfyquant.MarshalQuantConfig(c)
		return formats.Tensor{Name: strings.TrimSuffix(name, ".weight") + comfyquant.MarkerSuffix, Type: formats.U8, Shape: []int64{int64(len(b))}}, b
	}
	// encode writes the module of typ, or its INT8 twin.
	encode := func(typ convrot.Type, twin bool) func(string, []float32, int64, int64) ([]formats.Tensor, [][]byte) {
		return func(name string, w []float32, out, in int64) ([]formats.Tensor, [][]byte) {
			p, err := convrot.NewLayer(formats.Tensor{Name: name, Type: formats.F32, Shape: []int64{out, in}}, convrot.Options{Type: typ, GroupSize: 64})
			if err != nil || p.Keep {
				t.Fatalf("%s: %v %s", name, err, p.Note)
			}
			bufs, err := p.EncodeBlock(w, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !twin {
				mk, mb := marker(name, p.Config)
				return append(p.Tensors()[:len(bufs)], mk), append(bufs, mb)
			}
			codes, scales := make([]byte, out*in), bufs[1]
			for r := int64(0); r < out; r++ {
				row, packed := codes[r*in:(r+1)*in], bufs[0][r*in/2:(r+1)*in/2]
				if typ == convrot.W4A4 {
					convrot.W4A4Int8Row(row, packed)
					continue
				}
				if err := convrot.W4A8Int8Row(row, packed, bufs[1][r*in/16:(r+1)*in/16], bytesF32(bufs[3]), 16); err != nil {
					t.Fatal(err)
				}
			}
			if typ == convrot.W4A8 {
				scales = bufs[2]
			}
			mk, mb := marker(name, comfyquant.QuantConfig{Format: comfyquant.FormatInt8, Convrot: true, GroupSize: p.Config.GroupSize})
			base := strings.TrimSuffix(name, ".weight")
			return []formats.Tensor{{Name: name, Type: formats.I8, Shape: []int64{out, in}},
					{Name: base + ".weight_scale", Type: formats.F32, Shape: []int64{out, 1}}, mk},
				[][]byte{codes, scales, mb}
		}
	}
	render := func(dm, rt string) []float32 {
		m, err := infer.Load(infer.Components{"diffusion-model": dm, "clip_l": parts["clip_l"], "t5xxl": parts["t5xxl"], "vae": parts["vae"]}, infer.LoadOptions{Threads: 2, Runtime: rt})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		res, err := m.Generate(infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 1, Guidance: 3.5, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Pixels
	}
	equal := func(a, b []float32) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return len(a) == len(b)
	}
	for _, typ := range []convrot.Type{convrot.W4A8, convrot.W4A4} {
		mod, twin := filepath.Join(dir, typ.String()+".safetensors"), filepath.Join(dir, typ.String()+"-int8.safetensors")
		writeModules(t, parts["diffusion-model"], mod, encode(typ, false))
		writeModules(t, parts["diffusion-model"], twin, encode(typ, true))
		a, b := render(mod, infer.RuntimeComfyUI), render(twin, infer.RuntimeComfyUI)
		if same := equal(a, b); same != (typ == convrot.W4A8) {
			t.Errorf("%s: render equal to its INT8 twin's: %v, want %v", typ, same, typ == convrot.W4A8)
		}
		if typ == convrot.W4A4 && equal(a, render(mod, infer.RuntimeSDCPP)) {
			t.Errorf("%s: int4 activations render as the dequantized module does", typ)
		}
	}
}

func bytesF32(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}
