package synth

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// The full-size parameter counts are the published ones of the real models
// (diffusers/transformers counts), an oracle independent of the builders.
func TestFullSizeParams(t *testing.T) {
	cases := []struct {
		arch   string
		prefix string
		want   int64
	}{
		{"sd1", "model.diffusion_model.", 859_520_964},
		{"sd1", "first_stage_model.", 83_653_863},
		{"sd1", "cond_stage_model.transformer.text_model.embeddings.position_ids", 77},
		{"sd1", "cond_stage_model.", 123_060_480 + 77},
		{"sdxl", "model.diffusion_model.", 2_567_463_684},
		{"sd2", "model.diffusion_model.", 865_910_724},
		// diffusers' SD 2 text_encoder (340,387,840) stops at layer 23 of 24; the
		// checkpoint keeps the 24th (12,596,224), text_projection and logit_scale.
		{"sd2", "cond_stage_model.", 340_387_840 + 12_596_224 + 1024*1024 + 1},
		{"sdxl", "conditioner.embedders.0.", 123_060_480},
		{"sdxl", "conditioner.embedders.1.", 694_659_840 + 1}, // + logit_scale
		{"flux", "", 11_901_408_320},
		{"wan", "", 1_418_996_800},
		{"sd1_unet", "", 859_520_964},
		{"vae", "", 83_653_863},
		{"clip_l", "", 123_060_480},
		{"t5xxl", "", 4_762_310_656},
	}
	for _, c := range cases {
		ts, err := Tensors(Spec{Arch: c.arch})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, x := range ts {
			if strings.HasPrefix(x.Name, c.prefix) {
				e, _ := formats.Elements(x.Shape)
				n += e
			}
		}
		if n != c.want {
			t.Errorf("%s %q: %d parameters, want %d", c.arch, c.prefix, n, c.want)
		}
	}
}

func TestKnownNamesAndShapes(t *testing.T) {
	want := map[string][]int64{
		"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": {320, 768},
		"model.diffusion_model.input_blocks.1.1.proj_in.weight":                         {320, 320, 1, 1},
		"model.diffusion_model.output_blocks.2.1.conv.weight":                           {1280, 1280, 3, 3},
		"model.diffusion_model.output_blocks.5.2.conv.weight":                           {1280, 1280, 3, 3},
		"model.diffusion_model.out.2.weight":                                            {4, 320, 3, 3},
		"first_stage_model.decoder.up.1.block.0.nin_shortcut.weight":                    {256, 512, 1, 1},
		"first_stage_model.quant_conv.weight":                                           {8, 8, 1, 1},
		"cond_stage_model.transformer.text_model.encoder.layers.11.mlp.fc2.weight":      {768, 3072},
		"cond_stage_model.transformer.text_model.embeddings.position_ids":               {1, 77},
	}
	ts, err := Tensors(Spec{Arch: "sd1", DType: formats.F16})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, x := range ts {
		if seen[x.Name] {
			t.Errorf("duplicate tensor %q", x.Name)
		}
		seen[x.Name] = true
		if w, ok := want[x.Name]; ok {
			if !equalShape(x.Shape, w) {
				t.Errorf("%s: shape %v, want %v", x.Name, x.Shape, w)
			}
			delete(want, x.Name)
		}
		wantType := formats.F16
		if strings.HasSuffix(x.Name, "position_ids") {
			wantType = formats.I64
		}
		if x.Type != wantType {
			t.Errorf("%s: type %s, want %s", x.Name, x.Type, wantType)
		}
	}
	for n := range want {
		t.Errorf("missing %s", n)
	}
	// SDXL has depth-10 transformers at its last level and label_emb.
	xl, _ := Tensors(Spec{Arch: "sdxl"})
	names := map[string][]int64{}
	for _, x := range xl {
		names[x.Name] = x.Shape
	}
	for n, s := range map[string][]int64{
		"model.diffusion_model.label_emb.0.0.weight":                                              {1280, 2816},
		"model.diffusion_model.input_blocks.8.1.transformer_blocks.9.attn2.to_k.weight":           {1280, 2048},
		"conditioner.embedders.1.model.transformer.resblocks.31.attn.in_proj_weight":              {3840, 1280},
		"conditioner.embedders.0.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight": {768, 768},
	} {
		if !equalShape(names[n], s) {
			t.Errorf("sdxl %s: shape %v, want %v", n, names[n], s)
		}
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestScaledRowsAndDepth(t *testing.T) {
	ts, err := Tensors(TinySD1)
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for _, x := range ts {
		if len(x.Shape) == 2 && x.Shape[1]%256 == 0 {
			k++
		}
		if strings.Contains(x.Name, "encoder.layers.2.") {
			t.Errorf("depth 2 but %s exists", x.Name)
		}
	}
	if k == 0 {
		t.Error("the tiny model has no 2-D tensor with 256-element rows (k-quants would not apply)")
	}
	full, _ := Tensors(Spec{Arch: "sd1"})
	if len(full)-len(ts) != 10*16 {
		// Two of CLIP's twelve layers are kept: ten layers of 16 tensors go.
		t.Errorf("tiny has %d tensors, full %d", len(ts), len(full))
	}
	// Scaled widths stay whole q8_0 blocks, so every scaled linear row quantizes.
	f, err := Tensors(Spec{Arch: "flux", Scale: 1.0 / 16, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range f {
		if len(x.Shape) == 2 && x.Shape[1]%32 != 0 {
			t.Errorf("%s: row of %d elements", x.Name, x.Shape[1])
		}
	}
}

func TestDataChunkIndependent(t *testing.T) {
	spec := Spec{Arch: "sd1", Scale: 0.025, Depth: 1, Seed: 7, DType: formats.BF16}
	ts, _ := Tensors(spec)
	for _, x := range []TensorSpec{ts[0], ts[len(ts)-1]} {
		all, err := io.ReadAll(Data(spec, x))
		if err != nil {
			t.Fatal(err)
		}
		size, _ := x.Type.Bytes(x.Shape)
		if int64(len(all)) != size {
			t.Fatalf("%s: %d bytes, want %d", x.Name, len(all), size)
		}
		for _, chunk := range []int{1, 3, 7, 4096} {
			var got []byte
			r := Data(spec, x)
			buf := make([]byte, chunk)
			for {
				n, err := r.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, all) {
				t.Errorf("%s: reading in chunks of %d gives different bytes", x.Name, chunk)
			}
		}
	}
}

func TestValueDistribution(t *testing.T) {
	spec := Spec{Arch: "sd1", DType: formats.F32, Seed: 3}
	x := TensorSpec{Name: "w", Shape: []int64{1024, 1024}, Type: formats.F32, Init: InitWeight}
	data, _ := io.ReadAll(Data(spec, x))
	var sum, sq float64
	n := len(data) / 4
	for i := 0; i < n; i++ {
		v := float64(math.Float32frombits(uint32(data[4*i]) | uint32(data[4*i+1])<<8 | uint32(data[4*i+2])<<16 | uint32(data[4*i+3])<<24))
		sum += v
		sq += v * v
	}
	mean := sum / float64(n)
	std := math.Sqrt(sq/float64(n) - mean*mean)
	if math.Abs(mean) > 1e-3 || math.Abs(std-1.0/32) > 1e-3 {
		t.Errorf("mean %g std %g, want 0 and %g", mean, std, 1.0/32)
	}
}

func f16ToF32(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0:
		return sign * m * math.Pow(2, -24)
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

// Every half-precision value converts back to itself, and values between
// two neighbours round to the nearer one (to the even one at the midpoint).
func TestF32ToF16(t *testing.T) {
	for h := 0; h < 0x7c00; h++ {
		v := f16ToF32(uint16(h))
		if got := F32ToF16(float32(v)); got != uint16(h) {
			t.Fatalf("%#04x (%g) -> %#04x", h, v, got)
		}
		if got := F32ToF16(float32(-v)); got != uint16(h)|0x8000 {
			t.Fatalf("-%#04x -> %#04x", h, got)
		}
		if h == 0x7bff {
			break
		}
		next := f16ToF32(uint16(h + 1))
		mid := (v + next) / 2
		want := uint16(h)
		if h&1 == 1 {
			want++
		}
		if got := F32ToF16(float32(mid)); got != want {
			t.Fatalf("midpoint of %#04x and next -> %#04x, want %#04x", h, got, want)
		}
		if got := F32ToF16(float32(v + (next-v)*0.75)); got != uint16(h+1) {
			t.Fatalf("3/4 between %#04x and next -> %#04x", h, got)
		}
	}
	if F32ToF16(70000) != 0x7c00 || F32ToF16(float32(math.Inf(-1))) != 0xfc00 || F32ToF16(float32(math.NaN()))&0x7fff <= 0x7c00 {
		t.Error("overflow, infinity or NaN mishandled")
	}
	if F32ToBF16(1) != 0x3f80 || F32ToBF16(math.Float32frombits(0x3f808000)) != 0x3f80 ||
		F32ToBF16(math.Float32frombits(0x3f818000)) != 0x3f82 || F32ToBF16(float32(math.NaN()))&0x7f80 != 0x7f80 {
		t.Error("bf16 rounding wrong")
	}
}

func TestWriteReadBack(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file string
		spec Spec
	}{
		{"sd1.safetensors", Spec{Arch: "sd1", Scale: 0.025, TextScale: 1.0 / 12, VAEScale: 1.0 / 32, Depth: 1, Seed: 2, DType: formats.F16}},
		{"sdxl.gguf", Spec{Arch: "sdxl", Scale: 0.025, TextScale: 1.0 / 20, VAEScale: 1.0 / 32, Depth: 1, DType: formats.BF16}},
		{"flux.gguf", Spec{Arch: "flux", Scale: 1.0 / 32, Depth: 1, DType: formats.F32}},
		{"wan.safetensors", Spec{Arch: "wan", Scale: 1.0 / 32, Depth: 1, DType: formats.F16}},
	} {
		path := filepath.Join(dir, c.file)
		if err := Write(path, c.spec); err != nil {
			t.Fatal(err)
		}
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		ts, _ := Tensors(c.spec)
		got := m.Tensors()
		if len(got) != len(ts) {
			t.Fatalf("%s: %d tensors, want %d", c.file, len(got), len(ts))
		}
		for i, x := range ts {
			if len(x.Shape) == 0 && strings.HasSuffix(c.file, ".gguf") {
				x.Shape = []int64{1} // GGUF has no 0-D tensors
			}
			if got[i].Name != x.Name || got[i].Type != x.Type || !equalShape(got[i].Shape, x.Shape) {
				t.Fatalf("%s: tensor %d is %s %s %v, want %s %s %v", c.file, i, got[i].Name, got[i].Type, got[i].Shape, x.Name, x.Type, x.Shape)
			}
		}
		last := got[len(got)-1]
		data, err := formats.ReadTensor(m, &last)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := io.ReadAll(Data(c.spec, ts[len(ts)-1]))
		if !bytes.Equal(data, want) {
			t.Errorf("%s: data of %s differs", c.file, last.Name)
		}
		m.Close()
	}
}

// The spec's bytes depend on its seed.
func TestTinySD1Seed(t *testing.T) {
	var a, b bytes.Buffer
	if err := WriteTo(&a, "safetensors", TinySD1); err != nil {
		t.Fatal(err)
	}
	s := TinySD1
	s.Seed++
	if err := WriteTo(&b, "safetensors", s); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("a different seed gives the same bytes")
	}
	if a.Len() >= 2_000_000 {
		t.Errorf("TinySD1 is %d bytes, want under 2 MB", a.Len())
	}
}

func TestUnknownArchAndDType(t *testing.T) {
	if _, err := Tensors(Spec{Arch: "nope"}); err == nil {
		t.Error("unknown architecture accepted")
	}
	if _, err := Tensors(Spec{Arch: "sd1", DType: formats.Q4_K}); err == nil {
		t.Error("q4_K accepted as a synth dtype")
	}
}

// Generation streams: producing a large model allocates a bounded amount,
// independent of its size.
func TestWriteBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	spec := Spec{Arch: "sdxl", Scale: 0.25, Depth: 3, DType: formats.F16}
	desc, _ := Descriptors(spec)
	var total int64
	for _, d := range desc {
		total += d.Size
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := WriteTo(io.Discard, "safetensors", spec); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if total < 50<<20 || alloc > 8<<20 {
		t.Errorf("writing %d bytes allocated %d bytes", total, alloc)
	}
}

func BenchmarkWriteTo(b *testing.B) {
	for _, dt := range []formats.DType{formats.F32, formats.F16, formats.BF16} {
		b.Run(dt.String(), func(b *testing.B) {
			spec := Spec{Arch: "sd1", Scale: 0.25, DType: dt}
			desc, _ := Descriptors(spec)
			var total int64
			for _, d := range desc {
				total += d.Size
			}
			b.SetBytes(total)
			for i := 0; i < b.N; i++ {
				if err := WriteTo(io.Discard, "safetensors", spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTinySDImatrixGolden checks that gensynth's synthetic imatrix for the
// tiny model regenerates byte for byte and covers only its linear weights,
// every one of which a q4_0 conversion quantizes (the README's example).
func TestTinySDImatrixGolden(t *testing.T) {
	want, err := os.ReadFile("../../testdata/tiny-sd1.imatrix.dat")
	if err != nil {
		t.Fatal(err)
	}
	m := TinySD.Imatrix(4)
	var buf bytes.Buffer
	if err := imatrix.WriteDat(&buf, m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("testdata/tiny-sd1.imatrix.dat differs from synth.TinySD.Imatrix(4): run go run ./internal/synth/cmd/gensynth -testdata testdata -force")
	}
	shapes := map[string][]int64{}
	for _, t := range TinySD.Tensors() {
		shapes[t.Name] = t.Shape
	}
	for _, e := range m.Entries {
		s := shapes[e.Name]
		if len(s) != 2 || int64(len(e.Sum2)) != s[1] {
			t.Errorf("entry %s: %d values for shape %v", e.Name, len(e.Sum2), s)
		}
		if s[1]%32 != 0 {
			t.Errorf("entry %s: rows of %d are not q4_0 blocks", e.Name, s[1])
		}
	}
	if len(m.Entries) < 10 {
		t.Errorf("only %d entries", len(m.Entries))
	}
}
