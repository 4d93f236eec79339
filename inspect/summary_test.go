package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/internal/synth"
)

// fakeModel is an in-memory formats.Model.
type fakeModel struct {
	info    formats.Info
	tensors []formats.Tensor
	meta    formats.Metadata
	data    map[string][]byte
	reads   int
}

func (f *fakeModel) Path() string               { return "fake.gguf" }
func (f *fakeModel) Info() formats.Info         { return f.info }
func (f *fakeModel) Tensors() []formats.Tensor  { return f.tensors }
func (f *fakeModel) Metadata() formats.Metadata { return f.meta }
func (f *fakeModel) Close() error               { return nil }
func (f *fakeModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	f.reads++
	d, ok := f.data[t.Name]
	if !ok {
		return 0, fmt.Errorf("no data for %s", t.Name)
	}
	return copy(p, d[off:]), nil
}

func newFake() *fakeModel {
	long := "model.diffusion_model." + strings.Repeat("x", 120) + ".weight" // 149 bytes
	mk := func(name string, dt formats.DType, shape ...int64) formats.Tensor {
		size, _ := dt.Bytes(shape)
		return formats.Tensor{Name: name, Type: dt, Shape: shape, Size: size, File: "fake.gguf"}
	}
	marker := []byte(`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`)
	f := &fakeModel{
		info: formats.Info{Format: "gguf", Version: 3, Alignment: 32, DataOffset: 4096, Files: []string{"fake.gguf"},
			Warnings: []string{"fake.gguf: 7 bytes after the last tensor"}},
		tensors: []formats.Tensor{
			mk("double_blocks.0.img_attn.qkv.weight", formats.Q4_K, 768, 256),
			mk("double_blocks.0.img_attn.qkv.bias", formats.F32, 768),
			mk("single_blocks.0.linear1.weight", formats.Q8_0, 64, 256),
			mk("double_blocks.0.img_mlp.0.comfy_quant", formats.U8, int64(len(marker))),
			mk("broken.comfy_quant", formats.U8, 3),
			mk(long, formats.F16, 4, 4),
			mk(strings.Repeat("y", 70), formats.F16, 2),
			mk("patch_embedding.weight", formats.F16, 8, 4, 1, 2, 2),
		},
		meta: formats.Metadata{
			{Key: "general.architecture", Type: formats.TypeString, Value: "flux"},
			{Key: "general.alignment", Type: formats.TypeUint32, Value: uint32(32)},
			{Key: "tokenizer.ggml.tokens", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeString,
				Values: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}}},
			{Key: "bytes", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeUint8, Values: []uint8{1, 2, 255}}},
			{Key: "scale", Type: formats.TypeFloat32, Value: float32(math.NaN())},
			{Key: "ratio", Type: formats.TypeFloat32, Value: float32(0.1)},
			{Key: "notes", Type: formats.TypeString, Value: strings.Repeat("z", 500)},
		},
		data: map[string][]byte{"double_blocks.0.img_mlp.0.comfy_quant": marker, "broken.comfy_quant": []byte("{x}")},
	}
	return f
}

func TestSummarize(t *testing.T) {
	m := newFake()
	s, err := Summarize(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.HighRank) != 1 || s.HighRank[0] != "patch_embedding.weight" {
		t.Errorf("high-rank tensors %q", s.HighRank)
	}
	if s.TensorCount != 8 || s.Architecture.Name != "flux" || s.Version != 3 || s.Alignment != 32 {
		t.Errorf("count %d arch %q version %d alignment %d", s.TensorCount, s.Architecture.Name, s.Version, s.Alignment)
	}
	var params, bytes int64
	for _, x := range m.tensors {
		params += x.Elements()
		bytes += x.Size
	}
	if s.ParamCount != params || s.TotalBytes != bytes {
		t.Errorf("params %d bytes %d, want %d %d", s.ParamCount, s.TotalBytes, params, bytes)
	}
	// Types: sorted by bytes, percentages add up to 100, sums match.
	var pct float64
	var tb int64
	for i, ty := range s.Types {
		pct += ty.Percent
		tb += ty.Bytes
		if i > 0 && ty.Bytes > s.Types[i-1].Bytes {
			t.Errorf("types not sorted by bytes: %v", s.Types)
		}
	}
	if math.Abs(pct-100) > 0.05 || tb != s.TotalBytes {
		t.Errorf("type percentages sum to %g, bytes to %d", pct, tb)
	}
	if s.Types[0].Type != "q4_K" || s.Types[0].Bytes != 768*144 {
		t.Errorf("largest type %+v, want q4_K of %d bytes", s.Types[0], 768*144)
	}
	// ComfyUI markers: parsed, and a broken one reported without failing.
	if len(s.ComfyQuant) != 2 || s.ComfyQuant[0].Module != "double_blocks.0.img_mlp.0" ||
		s.ComfyQuant[0].Format != "int8_tensorwise" || s.ComfyQuant[0].Error != "" || s.ComfyQuant[1].Error == "" {
		t.Errorf("comfy_quant = %+v", s.ComfyQuant)
	}
	if m.reads != 2 {
		t.Errorf("%d tensor reads, want only the 2 comfy_quant markers", m.reads)
	}
	if ln := s.LongNames; ln.Count != 2 || ln.OverComfyGGUF != 1 || ln.OverSDCpp != 0 || ln.Longest != 149 {
		t.Errorf("long names %+v", ln)
	}
	if len(s.Tensors) != 8 || s.Tensors[0].Shape[1] != 256 || s.Tensors[0].Size != 768*144 {
		t.Errorf("tensor table %+v", s.Tensors[:1])
	}

	// Filters narrow the table only.
	s2, _ := Summarize(m, Options{Filters: []*regexp.Regexp{regexp.MustCompile(`^single_`), regexp.MustCompile(`qkv\.bias$`)}})
	if s2.Matched != 2 || len(s2.Tensors) != 2 || s2.TensorCount != 8 {
		t.Errorf("filtered: matched %d listed %d count %d", s2.Matched, len(s2.Tensors), s2.TensorCount)
	}
	s3, _ := Summarize(m, Options{NoTensors: true})
	if len(s3.Tensors) != 0 || s3.Matched != 8 {
		t.Errorf("--no-tensors lists %d", len(s3.Tensors))
	}
}

func TestWriteText(t *testing.T) {
	s, _ := Summarize(newFake(), Options{})
	var b bytes.Buffer
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"format:        gguf v3",
		"alignment:     32",
		"architecture:  flux",
		`tokenizer.ggml.tokens = ["a", "b", "c", "d", "e", "f", "g", "h", ... (4 more)]`,
		"bytes = [1, 2, 255]",
		"scale = NaN",
		"ratio = 0.1\n",
		"notes = " + strings.Repeat("z", ShortString) + "... (340 more bytes)",
		"stock ggml refuses names of 64 bytes or more; sd.cpp accepts up to 159, ComfyUI-GGUF 127",
		"(1 over ComfyUI-GGUF's limit, 0 over sd.cpp's)",
		`double_blocks.0.img_mlp.0: int8_tensorwise convrot G=256  {"format": "int8_tensorwise"`,
		"broken: invalid JSON",
		"7 bytes after the last tensor",
		"double_blocks.0.img_attn.qkv.weight",
		"q4_K  [768, 256]",
		"more than 4 dims: 1 tensor (patch_embedding.weight); ggml's GGUF reader refuses them",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

// jsonKeys collects every object key in a decoded JSON value.
func jsonKeys(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			into[k] = true
			jsonKeys(e, into)
		}
	case []any:
		for _, e := range x {
			jsonKeys(e, into)
		}
	}
}

func TestJSONMatchesSchemaDoc(t *testing.T) {
	s, _ := Summarize(newFake(), Options{Filters: []*regexp.Regexp{regexp.MustCompile(`.`)}})
	var b bytes.Buffer
	if err := WriteJSON(&b, []*Summary{s}); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, b.String())
	}
	// Byte arrays are numbers (not base64), NaN is a string, floats keep float32 precision.
	meta := v["metadata"].([]any)
	if got := fmt.Sprint(meta[3].(map[string]any)["value"]); got != "[1 2 255]" {
		t.Errorf("u8 array value = %s", got)
	}
	if got := meta[4].(map[string]any)["value"]; got != "NaN" {
		t.Errorf("NaN value = %v", got)
	}
	if !strings.Contains(b.String(), `"value": 0.1`) || strings.Contains(b.String(), "0.10000000149") {
		t.Error("f32 0.1 not written as 0.1")
	}
	if a := meta[2].(map[string]any); a["elem_type"] != "string" || a["count"] != 12.0 {
		t.Errorf("array entry %v", a)
	}

	doc, err := os.ReadFile("../docs/inspect-json.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	jsonKeys(v, keys)
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for _, k := range sorted {
		if !snake.MatchString(k) {
			t.Errorf("JSON field %q is not snake_case", k)
		}
		if !bytes.Contains(doc, []byte("| `"+k+"` |")) {
			t.Errorf("JSON field %q is not documented in docs/inspect-json.md", k)
		}
	}
	// Empty lists are [] (never null).
	empty, _ := Summarize(&fakeModel{info: formats.Info{Format: "safetensors"}}, Options{})
	b.Reset()
	WriteJSON(&b, []*Summary{empty})
	if strings.Contains(b.String(), "null") {
		t.Errorf("empty summary has null fields:\n%s", b.String())
	}
	// safetensors has no version or alignment: the fields are left out, not 0.
	if strings.Contains(b.String(), `"version"`) || strings.Contains(b.String(), `"alignment"`) {
		t.Errorf("a safetensors summary states a GGUF version or alignment:\n%s", b.String())
	}
	// Several summaries make an array.
	b.Reset()
	WriteJSON(&b, []*Summary{empty, empty})
	var arr []any
	if err := json.Unmarshal(b.Bytes(), &arr); err != nil || len(arr) != 2 {
		t.Errorf("two summaries: %v, %d", err, len(arr))
	}
}

// Real files: the committed tiny model, sharded safetensors and split GGUF.
func TestSummarizeFiles(t *testing.T) {
	m, err := formats.Open("../testdata/tiny-sd1.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(m, Options{})
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := synth.TinySD.Tensors()
	if s.Format != "safetensors" || s.TensorCount != len(want) || s.Architecture.Name != "sd1" || len(s.Tensors) != len(want) {
		t.Errorf("tiny: format %s, %d tensors, arch %s", s.Format, s.TensorCount, s.Architecture.Name)
	}
	for i, x := range s.Tensors {
		if x.Name != want[i].Name || x.Offset < s.DataOffset {
			t.Fatalf("tensor %d: %s at %d", i, x.Name, x.Offset)
		}
	}

	dir := t.TempDir()
	desc, _ := synth.Descriptors(synth.TinySD1)
	half := len(desc) / 2
	parts := [][]formats.Tensor{desc[:half], desc[half:]}
	for k, part := range parts {
		for _, format := range []string{"safetensors", "gguf"} {
			var path string
			var tw formats.TensorWriter
			var err error
			f := &bytes.Buffer{}
			if format == "safetensors" {
				path = filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", k+1))
				tw, err = safetensors.NewWriter(f, part, nil, nil)
			} else {
				path = gguf.SplitPath(filepath.Join(dir, "split"), k+1, 2)
				meta := formats.Metadata{
					{Key: gguf.SplitNoKey, Type: formats.TypeUint16, Value: uint16(k)},
					{Key: gguf.SplitCountKey, Type: formats.TypeUint16, Value: uint16(2)},
					{Key: gguf.SplitTensorsCountKey, Type: formats.TypeInt32, Value: int32(len(desc))},
				}
				tw, err = gguf.NewWriter(f, part, meta, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range part {
				tw.Write(make([]byte, x.Size))
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(path, f.Bytes(), 0o644)
		}
	}
	for _, path := range []string{
		filepath.Join(dir, "model-00002-of-00002.safetensors"),
		gguf.SplitPath(filepath.Join(dir, "split"), 1, 2),
	} {
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := Summarize(m, Options{})
		m.Close()
		if len(s.Files) != 2 || s.TensorCount != len(desc) || s.Architecture.Name != "sd1" {
			t.Errorf("%s: %d files, %d tensors, arch %s", path, len(s.Files), s.TensorCount, s.Architecture.Name)
		}
		if s.Tensors[half].File == s.Tensors[0].File {
			t.Errorf("%s: second half not in the second shard", path)
		}
		var b bytes.Buffer
		WriteText(&b, s)
		if !strings.Contains(b.String(), "2 shards: ") || !strings.Contains(b.String(), "FILE") {
			t.Errorf("%s: text lacks the shards", path)
		}
	}
}

// The sd-cli golden inputs (when present) exercise comfy_quant markers,
// F8 and I64 tensors from a file written by another tool.
func TestSharedGoldenInput(t *testing.T) {
	path := "../../shared/data/sdcli-golden/input.safetensors"
	if _, err := os.Stat(path); err != nil {
		t.Skip("shared data absent")
	}
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := Summarize(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.ComfyQuant) != 1 || s.ComfyQuant[0].Format != "int8_tensorwise" {
		t.Errorf("comfy_quant = %+v", s.ComfyQuant)
	}
	var b bytes.Buffer
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
}

// TestAdapterSummary checks the adapter section of the committed tiny LoRA
// (text and JSON, every field documented) and that a model has none.
func TestAdapterSummary(t *testing.T) {
	m, err := formats.Open("../testdata/tiny-sd1-lora.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(m, Options{NoTensors: true})
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	a := s.Adapter
	if a == nil || a.Format != "kohya" || a.Layers != 16 || a.Kinds["lora"] != 16 || a.Parts["unet"] != 16 ||
		len(a.Ranks) != 1 || a.Ranks[0] != 2 || len(a.Alphas) != 1 || a.Alphas[0] != 2 || a.Family != "sd1" {
		t.Fatalf("adapter summary %+v", a)
	}
	var text bytes.Buffer
	if err := WriteText(&text, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "adapter:       kohya, 16 layers for sd1") || !strings.Contains(text.String(), "ranks:       2") {
		t.Errorf("text:\n%s", text.String())
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, []*Summary{s}); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/inspect-json.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	jsonKeys(v["adapter"], keys)
	for k := range keys {
		if k == "kohya" || k == "lora" || k == "unet" {
			continue // map keys, not fields
		}
		if !bytes.Contains(doc, []byte("| `"+k+"` |")) {
			t.Errorf("adapter JSON field %q is not documented in docs/inspect-json.md", k)
		}
	}
	if len(keys) < 10 {
		t.Errorf("adapter JSON has only %d fields", len(keys))
	}
	model, err := formats.Open("../testdata/tiny-sd1.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	if ms, _ := Summarize(model, Options{NoTensors: true}); ms.Adapter != nil {
		t.Errorf("a checkpoint summarised as an adapter: %+v", ms.Adapter)
	}
}

// TestInspectNamesFamilies: the text summary names each family layout's
// family, its ComfyUI-GGUF and sd.cpp names and whether generate runs it.
func TestInspectNamesFamilies(t *testing.T) {
	for _, c := range []struct{ arch, want string }{
		{"layout-sdxl-refiner", "SDXL (refiner); ComfyUI-GGUF: sdxl; sd.cpp: none; generate: yes"},
		{"layout-wan2.2-ti2v-5b", "Wan 2.1 / 2.2 (ti2v-5b); ComfyUI-GGUF: wan; sd.cpp: wan2.2-ti2v; generate: yes"},
		{"layout-krea2", "Krea 2; ComfyUI-GGUF: none; sd.cpp: krea2; generate: no"},
	} {
		path := filepath.Join(t.TempDir(), "m.safetensors")
		if err := synth.Write(path, synth.Spec{Arch: c.arch}); err != nil {
			t.Fatal(err)
		}
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Summarize(m, Options{})
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := WriteText(&b, s); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%s: summary lacks %q:\n%s", c.arch, c.want, b.String())
		}
	}
}
