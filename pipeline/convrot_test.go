package pipeline

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats/comfyquant"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// streamPlan builds a plan that writes every 2-D ".weight" of m as a
// ComfyUI module with opt and copies the other tensors: the weight,
// weight_scale and comfy_quant outputs each have their own producer, which
// sees only a range of rows, as a streaming writer uses the convrot codecs.
func streamPlan(t *testing.T, m formats.Model, opt convrot.Options) (*Plan, []convrot.Layer) {
	var pl Plan
	var layers []convrot.Layer
	for _, src := range m.Tensors() {
		if len(src.Shape) != 2 {
			pl.Outputs = append(pl.Outputs, Output{Name: src.Name, Type: src.Type, Shape: src.Shape, Producer: Copy(m, src), Source: &src})
			continue
		}
		p, err := convrot.NewLayer(src, opt)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, p)
		var weight, scale Producer
		in := src.Shape[1]
		floats := tensor.Plain(m, src)
		if typ, ok := comfyquant.WeightType(p.Config.Format); ok && typ != formats.I8 {
			// Pass one: the whole tensor's amax, before the plan runs.
			all := make([]float32, src.Elements())
			if err := floats.Read(all, 0, &tensor.Scratch{}); err != nil {
				t.Fatal(err)
			}
			amax, err := convrot.AbsMax(all)
			if err != nil {
				t.Fatal(err)
			}
			f, err := convrot.NewFP8(typ, amax)
			if err != nil {
				t.Fatal(err)
			}
			weight = Convert(floats, typ, func(dst []byte, rows []float32, _ int) error { return f.Encode(dst, rows) })
			scale = Constant(convrot.PutScales(nil, []float32{f.Scale}))
		} else {
			q, err := p.Rows()
			if err != nil {
				t.Fatal(err)
			}
			weight = Convert(floats, formats.I8, func(dst []byte, rows []float32, _ int) error { return q.Quantize(dst, nil, rows) })
			scale = ProducerFunc(func(_ context.Context, dst []byte, first, n int64, s *tensor.Scratch) error {
				rows := s.Float32s(0, int(n*in))
				if err := floats.Read(rows, first*in, s); err != nil {
					return err
				}
				return q.ScaleBytes(dst, rows)
			})
		}
		pl.Outputs = append(pl.Outputs,
			Output{Name: p.Weight.Name, Type: p.Weight.Type, Shape: p.Weight.Shape, Producer: weight, Source: &src},
			Output{Name: p.Scale.Name, Type: p.Scale.Type, Shape: p.Scale.Shape, Producer: scale},
			Output{Name: p.Marker.Name, Type: p.Marker.Type, Shape: p.Marker.Shape, Producer: Constant(p.MarkerData)})
	}
	return &pl, layers
}

// outlierWeights returns rows×in N(0, 0.02²) weights where 8 input columns
// carry values factor times larger, the outlier channels of real models.
func outlierWeights(rows, in int, seed uint64, factor float32) []float32 {
	rng := rand.New(rand.NewPCG(seed, 99))
	w := make([]float32, rows*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02)
	}
	for range 8 {
		c := rng.IntN(in)
		for r := 0; r < rows; r++ {
			w[r*in+c] *= factor
		}
	}
	return w
}

func norm2(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

// TestStreamThroughPipeline writes a safetensors file with the pipeline in
// small chunks on two workers, reads it back with the safetensors reader,
// and checks that every tensor has exactly the bytes Layer.Encode gives for
// the whole tensor, that comfyquant.Detect finds the modules with their settings, and
// that decoding gives back the weights within the INT8 bound.
func TestStreamThroughPipeline(t *testing.T) {
	for _, opt := range []convrot.Options{{Type: convrot.Int8Convrot}, {Type: convrot.Int8}, {Type: convrot.FP8E4M3}, {Type: convrot.FP8E5M2}} {
		t.Run(opt.Type.String(), func(t *testing.T) {
			src := newMemModel("in.safetensors")
			ws := map[string][]float32{}
			for i, sh := range [][2]int64{{40, 512}, {9, 320}, {3, 1024}} {
				name := fmt.Sprintf("blk.%d.proj", i)
				w := outlierWeights(int(sh[0]), int(sh[1]), uint64(i+10), 40)
				ws[name] = w
				src.add(name+".weight", formats.F32, sh[:], convrot.PutScales(nil, w))
				src.add(name+".bias", formats.F32, []int64{sh[0]}, make([]byte, 4*sh[0]))
			}
			pl, plans := streamPlan(t, src, opt)
			out := filepath.Join(t.TempDir(), "out.safetensors")
			err := Run(context.Background(), at(pl, out, func(w io.Writer, tensors []formats.Tensor) (formats.TensorWriter, error) {
				return safetensors.NewWriter(w, tensors, nil, nil)
			}), Options{
				Threads:    2,
				ChunkBytes: 4096,
				MaxMemory:  1 << 16,
			})
			if err != nil {
				t.Fatal(err)
			}
			f, err := safetensors.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			for _, p := range plans {
				weight, scale, err := p.Encode(append([]float32(nil), ws[p.Module]...))
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []struct {
					desc formats.Tensor
					data []byte
				}{{p.Weight, weight}, {p.Scale, scale}, {p.Marker, p.MarkerData}} {
					got, ok := formats.Find(f, want.desc.Name)
					if !ok {
						t.Fatalf("%s missing from the output", want.desc.Name)
					}
					if got.Type != want.desc.Type || fmt.Sprint(got.Shape) != fmt.Sprint(want.desc.Shape) {
						t.Errorf("%s: %s %v in the file, planned %s %v", got.Name, got.Type, got.Shape, want.desc.Type, want.desc.Shape)
					}
					b, err := formats.ReadTensor(f, &got)
					if err != nil {
						t.Fatal(err)
					}
					if string(b) != string(want.data) {
						t.Errorf("%s: streamed bytes differ from Layer.Encode", got.Name)
					}
				}
			}

			mods, err := comfyquant.Detect(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(mods) != len(plans) {
				t.Fatalf("comfyquant.Detect found %d modules, want %d", len(mods), len(plans))
			}
			view, err := tensor.NewView(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, mod := range mods {
				p := plans[i]
				if mod.Name != p.Module || mod.Config.String() != p.Config.String() {
					t.Errorf("module %d: %s %s, planned %s %s", i, mod.Name, mod.Config, p.Module, p.Config)
				}
				ws0, ok := view.Lookup(mod.Weight.Name)
				if !ok || ws0.Module == nil {
					t.Fatalf("%s is not read as a module", mod.Weight.Name)
				}
				out, in := mod.Weight.Shape[0], mod.Weight.Shape[1]
				got := make([]float32, out*in)
				if err := ws0.Read(got, 0, &tensor.Scratch{}); err != nil {
					t.Fatal(err)
				}
				scales := make([]float32, mod.Scale.Elements())
				raw, err := formats.ReadTensor(f, &mod.Scale)
				if err != nil {
					t.Fatal(err)
				}
				if err := quant.DecodeFloats(mod.Scale.Type, scales, raw); err != nil {
					t.Fatal(err)
				}
				w := ws[mod.Name]
				for r := int64(0); r < out; r++ {
					var e2 float64
					for j := r * in; j < (r+1)*in; j++ {
						e2 += (float64(w[j]) - float64(got[j])) * (float64(w[j]) - float64(got[j]))
					}
					// INT8: sqrt(in)·s/2 per row (see TestInt8RoundTripBound);
					// FP8: half a step of 2^-3 (e4m3) or 2^-2 (e5m2) relative.
					var bound float64
					switch mod.Config.Format {
					case comfyquant.FormatInt8:
						bound = math.Sqrt(float64(in))*float64(scales[r])/2 + 1e-6*norm2(w[r*in:(r+1)*in])
					case comfyquant.FormatFP8E4M3:
						bound = norm2(w[r*in:(r+1)*in])/16 + math.Sqrt(float64(in))*float64(scales[0])*math.Ldexp(1, -10)
					default:
						bound = norm2(w[r*in:(r+1)*in])/8 + math.Sqrt(float64(in))*float64(scales[0])*math.Ldexp(1, -17)
					}
					if math.Sqrt(e2) > bound {
						t.Fatalf("%s row %d: error %g > bound %g", mod.Name, r, math.Sqrt(e2), bound)
					}
				}
			}
		})
	}
}
