package convrot

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats/comfyquant"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// streamPlan builds a pipeline plan that writes every 2-D ".weight" of m
// with opt and copies the other tensors: the weight, weight_scale and
// comfy_quant outputs each have their own producer, which sees only a range
// of rows, so this is how a streaming writer uses the package.
func streamPlan(t *testing.T, m formats.Model, opt Options) (*pipeline.Plan, []Layer) {
	dec, err := quant.Decoder(formats.F32)
	if err != nil {
		t.Fatal(err)
	}
	decode := pipeline.DecodeWith(dec.Dequantize)
	var pl pipeline.Plan
	var plans []Layer
	for _, src := range m.Tensors() {
		src := src
		if len(src.Shape) != 2 {
			pl.Outputs = append(pl.Outputs, pipeline.Output{Name: src.Name, Type: src.Type, Shape: src.Shape, Producer: pipeline.Copy(m, src), Source: &src})
			continue
		}
		p, err := NewLayer(src, opt)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
		var weight, scale pipeline.Producer
		in := src.Shape[1]
		if typ, ok := comfyquant.WeightType(p.Config.Format); ok && typ != formats.I8 {
			// Pass one: the whole tensor's amax, before the plan runs.
			all := make([]float32, src.Elements())
			if err := readFloats(m, &src, 0, src.Shape[0], all); err != nil {
				t.Fatal(err)
			}
			amax, err := AbsMax(all)
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewFP8(typ, amax)
			if err != nil {
				t.Fatal(err)
			}
			weight = pipeline.Convert(m, src, typ, decode, func(dst []byte, rows []float32, _ int) error { return f.Encode(dst, rows) })
			scale = constant(PutScales(nil, []float32{f.Scale}))
		} else {
			q, err := p.Rows()
			if err != nil {
				t.Fatal(err)
			}
			weight = pipeline.Convert(m, src, formats.I8, decode, func(dst []byte, rows []float32, _ int) error { return q.Quantize(dst, nil, rows) })
			scale = pipeline.ProducerFunc(func(_ context.Context, dst []byte, first, n int64, s *pipeline.Scratch) error {
				rows := s.Float32s(0, int(n*in))
				if err := readFloats(m, &src, first, n, rows); err != nil {
					return err
				}
				return q.ScaleBytes(dst, rows)
			})
		}
		pl.Outputs = append(pl.Outputs,
			pipeline.Output{Name: p.Weight.Name, Type: p.Weight.Type, Shape: p.Weight.Shape, Producer: weight, Source: &src},
			pipeline.Output{Name: p.Scale.Name, Type: p.Scale.Type, Shape: p.Scale.Shape, Producer: scale},
			pipeline.Output{Name: p.Marker.Name, Type: p.Marker.Type, Shape: p.Marker.Shape, Producer: constant(p.MarkerData)})
	}
	return &pl, plans
}

// readFloats reads n F32 rows of t starting at row first.
func readFloats(m formats.Model, t *formats.Tensor, first, n int64, dst []float32) error {
	raw := make([]byte, 4*len(dst))
	if err := formats.ReadRows(m, t, first, n, raw); err != nil {
		return err
	}
	return quant.DecodeFloats(formats.F32, dst, raw)
}

// constant produces fixed bytes (a marker, a tensor-wise scale).
func constant(b []byte) pipeline.Producer {
	return pipeline.ProducerFunc(func(_ context.Context, dst []byte, first, n int64, _ *pipeline.Scratch) error {
		rb := int64(len(b))
		if len(dst) > 0 && n > 0 {
			rb = int64(len(dst)) / n
		}
		copy(dst, b[first*rb:])
		return nil
	})
}

// TestStreamThroughPipeline writes a safetensors file with the pipeline in
// small chunks on two workers, reads it back with the safetensors reader,
// and checks that every tensor has exactly the bytes Layer.Encode gives for
// the whole tensor, that comfyquant.Detect finds the modules with their settings, and
// that decoding gives back the weights within the INT8 bound.
func TestStreamThroughPipeline(t *testing.T) {
	for _, opt := range []Options{{Type: Int8Convrot}, {Type: Int8}, {Type: FP8E4M3}, {Type: FP8E5M2}} {
		t.Run(opt.Type.String(), func(t *testing.T) {
			src := newMemModel()
			ws := map[string][]float32{}
			for i, sh := range [][2]int64{{40, 512}, {9, 320}, {3, 1024}} {
				name := fmt.Sprintf("blk.%d.proj", i)
				w := gaussianWithOutliers(int(sh[0]), int(sh[1]), uint64(i+10), 40)
				ws[name] = w
				src.add(name+".weight", formats.F32, sh[:], PutScales(nil, w))
				src.add(name+".bias", formats.F32, []int64{sh[0]}, make([]byte, 4*sh[0]))
			}
			pl, plans := streamPlan(t, src, opt)
			out := filepath.Join(t.TempDir(), "out.safetensors")
			err := pipeline.Run(context.Background(), pl, pipeline.Options{
				OutPath: out, Threads: 2, ChunkBytes: 4096, MaxMemory: 1 << 16,
				NewWriter: func(w io.Writer, tensors []formats.Tensor) (formats.TensorWriter, error) {
					return safetensors.NewWriter(w, tensors, nil, nil)
				},
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
			for i, mod := range mods {
				p := plans[i]
				if mod.Name != p.Module || mod.Config.String() != p.Config.String() {
					t.Errorf("module %d: %s %s, planned %s %s", i, mod.Name, mod.Config, p.Module, p.Config)
				}
				d, err := NewDecoder(f, mod)
				if err != nil {
					t.Fatal(err)
				}
				out, in := mod.Weight.Shape[0], mod.Weight.Shape[1]
				got := make([]float32, out*in)
				if err := d.ReadRows(f, 0, out, got); err != nil {
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
						var sc [1]float32
						raw := make([]byte, 4)
						_ = formats.ReadRows(f, &mod.Scale, r, 1, raw)
						_ = quant.DecodeFloats(formats.F32, sc[:], raw)
						bound = math.Sqrt(float64(in))*float64(sc[0])/2 + 1e-6*norm2(w[r*in:(r+1)*in])
					case comfyquant.FormatFP8E4M3:
						bound = norm2(w[r*in:(r+1)*in])/16 + math.Sqrt(float64(in))*float64(d.fp8.Scale)*math.Ldexp(1, -10)
					default:
						bound = norm2(w[r*in:(r+1)*in])/8 + math.Sqrt(float64(in))*float64(d.fp8.Scale)*math.Ldexp(1, -17)
					}
					if math.Sqrt(e2) > bound {
						t.Fatalf("%s row %d: error %g > bound %g", mod.Name, r, math.Sqrt(e2), bound)
					}
				}
			}
		})
	}
}
