package quantize

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/pipeline"
)

// writeHeaderOnly writes a safetensors file of tensors whose data is a
// hole (a sparse file): planning reads headers only, so each family's
// layout at its real detection widths costs no disk and no time.
func writeHeaderOnly(t *testing.T, path string, tensors []formats.Tensor, meta map[string]string) {
	t.Helper()
	type entry struct {
		DType   string   `json:"dtype"`
		Shape   []int64  `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	head := map[string]any{}
	if len(meta) > 0 {
		head["__metadata__"] = meta
	}
	var off int64
	for _, x := range tensors {
		name, _ := x.Type.SafetensorsName()
		head[x.Name] = entry{name, x.Shape, [2]int64{off, off + x.Size}}
		off += x.Size
	}
	js, err := json.Marshal(head)
	if err != nil {
		t.Fatal(err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := uint64(len(js))
	hdr := []byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24), byte(n >> 32), byte(n >> 40), byte(n >> 48), byte(n >> 56)}
	if _, err := f.Write(append(hdr, js...)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(8+len(js)) + off); err != nil {
		t.Fatal(err)
	}
}

// familyCases are the synthetic layouts of every family the table knows,
// with what detection must find: the main family, its variant and the
// components (family IDs, in file order). meta adds metadata for variants
// only metadata tells apart.
var familyCases = []struct {
	layout, family, variant string
	meta                    map[string]string
	comps                   []string
}{
	{"layout-sd1", "sd1", "", nil, []string{"sd1", "vae", "clip_l"}},
	{"layout-sd1-inpaint", "sd1", "inpaint", nil, []string{"sd1", "vae", "clip_l"}},
	{"layout-sd2", "sd2", "", nil, []string{"sd2", "vae", "clip_h"}},
	{"layout-sdxl", "sdxl", "", nil, []string{"sdxl", "vae", "clip_l", "clip_g"}},
	{"layout-sdxl-inpaint", "sdxl", "inpaint", nil, []string{"sdxl", "vae", "clip_l", "clip_g"}},
	{"layout-sdxl-refiner", "sdxl", "refiner", nil, []string{"sdxl", "vae", "clip_g"}},
	{"layout-sd3-medium", "sd3", "medium", nil, nil},
	{"layout-sd3.5-medium", "sd3", "3.5-medium", nil, nil},
	{"layout-sd3.5-large", "sd3", "large", nil, nil},
	{"layout-flux-dev", "flux", "dev", nil, nil},
	{"layout-flux-schnell", "flux", "schnell", nil, nil},
	{"layout-flux-fill", "flux", "fill", nil, nil},
	{"layout-flux-dev", "flux", "kontext", map[string]string{"modelspec.title": "FLUX.1 Kontext [dev]"}, nil},
	{"layout-chroma", "chroma", "", nil, nil},
	{"layout-flux2-dev", "flux2", "dev", nil, nil},
	{"layout-flux2-klein", "flux2", "klein", nil, nil},
	{"layout-wan-t2v", "wan", "t2v", nil, nil},
	{"layout-wan-i2v", "wan", "i2v", nil, nil},
	{"layout-wan2.2-i2v", "wan", "2.2-i2v", nil, nil},
	{"layout-wan2.2-ti2v-5b", "wan", "ti2v-5b", nil, nil},
	{"layout-wan-t2v", "wan", "a14b-high-noise", map[string]string{"modelspec.title": "wan2.2_t2v_high_noise_14B"}, nil},
	{"layout-wan-t2v", "wan", "a14b-low-noise", map[string]string{"modelspec.title": "wan2.2_t2v_low_noise_14B"}, nil},
	{"layout-hunyuan-video-1.5", "hunyuan_video", "1.5", nil, nil},
	{"layout-ltxv", "ltxv", "", nil, nil},
	{"layout-ltx2", "ltx2", "", nil, nil},
	{"layout-qwen-image", "qwen_image", "", nil, nil},
	{"layout-qwen-image", "qwen_image", "edit", map[string]string{"modelspec.title": "Qwen-Image-Edit-2509"}, nil},
	{"layout-z-image", "z_image", "", nil, nil},
	{"layout-hidream", "hidream", "", nil, nil},
	{"layout-cosmos", "cosmos", "", nil, nil},
	{"layout-svd", "svd", "", nil, nil},
	{"layout-auraflow", "aura", "", nil, nil},
	{"layout-krea2", "krea2", "", nil, nil},
	{"layout-minimax-h3", "minimax_h3", "", nil, nil},
	{"layout-clip-l", "clip_l", "", nil, nil},
	{"layout-clip-g", "clip_g", "", nil, nil},
	{"layout-t5xxl", "t5xxl", "", nil, nil},
	{"layout-umt5xxl", "umt5xxl", "", nil, nil},
	{"layout-qwen2.5-vl", "qwen2.5vl", "", nil, nil},
	{"layout-qwen3", "qwen3", "", nil, nil},
	{"layout-mistral", "mistral", "", nil, nil},
	{"layout-gemma3", "gemma3", "", nil, nil},
	{"layout-llama3", "llama3", "", nil, nil},
	{"layout-vae-sd", "vae", "4ch", nil, nil},
	{"layout-vae-flux", "flux_vae", "16ch", nil, nil},
	{"layout-vae-wan2.1", "wan_vae", "2.1", nil, nil},
	{"layout-vae-wan2.2", "wan_vae", "2.2", nil, nil},
	{"layout-vae-ltx", "ltx_vae", "", nil, nil},
}

// TestFamilyTable: on each family's synthetic layout, detection names the
// family, variant and components; a Q4_K_M dry run keeps every tensor the
// table marks high precision unquantized; a
// diffusion model's GGUF carries its ComfyUI-GGUF architecture.
func TestFamilyTable(t *testing.T) {
	dir := t.TempDir()
	covered := map[string]bool{}
	for _, c := range familyCases {
		tensors, err := synth.Descriptors(synth.Spec{Arch: c.layout, DType: formats.F16})
		if err != nil {
			t.Fatal(err)
		}
		var md formats.Metadata
		for k, v := range c.meta {
			md = append(md, formats.KV{Key: k, Type: formats.TypeString, Value: v})
		}
		arch := family.Detect(tensors, md)
		if arch.Name != c.family || arch.Variant() != c.variant {
			t.Errorf("%s: detected %s (%q), want %s (%q)", c.layout, arch.Name, arch.Variant(), c.family, c.variant)
			continue
		}
		covered[c.family] = true
		if c.comps != nil {
			var got []string
			for _, x := range arch.Components {
				got = append(got, x.Name)
				covered[x.Name] = true
			}
			if !slices.Equal(got, c.comps) {
				t.Errorf("%s: components %v, want %v", c.layout, got, c.comps)
			}
		}
		in := filepath.Join(dir, c.layout+".safetensors")
		writeHeaderOnly(t, in, tensors, c.meta)
		res, err := quantizeRun(t.Context(), &Options{Input: in, Output: filepath.Join(dir, "out.gguf"), Type: "Q4_K_M"}, pipeline.Options{}, true)
		if err != nil {
			t.Errorf("%s: %v", c.layout, err)
			continue
		}
		f := family.ByID(c.family)
		if res.Arch != c.family {
			t.Errorf("%s: quantize saw %q", c.layout, res.Arch)
		}
		want := ""
		switch {
		case f.Kind == family.KindDiffusion:
			want = f.ComfyArch
		case f.GGUFNames != nil:
			want = f.LlamaArch()
		}
		if got, _ := res.Header.Metadata.String("general.architecture"); got != want {
			t.Errorf("%s: general.architecture %q, want %q", c.layout, got, want)
		}
		kept := 0
		for _, r := range res.rows() {
			_, cls := arch.Classify(r.Name, r.Shape)
			if cls.Keep == "" && cls.F32 == "" {
				continue
			}
			kept++
			if r.To.Quantized() {
				t.Errorf("%s: %s is %s (%s), want it kept in high precision", c.layout, r.Name, r.To, r.Reason)
			}
		}
		if f.Kind == family.KindDiffusion && kept == 0 {
			t.Errorf("%s: no tensor of the layout is on %s's keep lists", c.layout, c.family)
		}
	}
	for _, f := range family.Families {
		if !covered[f.ID] && f.ID != "clip" && f.ID != "t5" && f.ID != "llm" {
			t.Errorf("family %s has no synthetic layout in familyCases", f.ID)
		}
	}
}

// TestSD35LargeFallbacks: rows of 2432/4 are whole 32-element blocks but
// not 256-element ones, so Q4_K_M's q4_K becomes q5_0 with the reason said.
func TestSD35LargeFallbacks(t *testing.T) {
	in := layoutFile(t, t.TempDir(), "layout-sd3.5-large")
	res, err := quantizeRun(t.Context(), &Options{Input: in, Output: in + ".gguf", Type: "Q4_K_M"}, pipeline.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	r := rowOf(t, res, "joint_blocks.0.x_block.attn.proj.weight")
	if r.To != formats.Q5_0 || !strings.Contains(r.Reason, "does not fit q4_K") {
		t.Errorf("attn.proj: %s (%s), want the q5_0 fallback", r.To, r.Reason)
	}
}

// TestSDCppTarget: stable-diffusion.cpp 97d2990 runs int8_tensorwise
// (convrot or not) natively and does not
// apply FP8's weight_scale outside Ideogram 4.
func TestSDCppTarget(t *testing.T) {
	for _, c := range []struct {
		typ   string
		group int
		ok    bool
		want  string
	}{
		{"int8_convrot", 16, true, "run natively"},
		{"int8", 0, true, "run natively"},
		{"fp8_e4m3", 0, false, "weight_scale"},
	} {
		res, err := quantizeRun(t.Context(), &Options{Input: tinyPath, Output: filepath.Join(t.TempDir(), "x.safetensors"), Type: c.typ, GroupSize: c.group, Targets: []string{TargetSDCpp}}, pipeline.Options{}, true)
		if err != nil {
			t.Errorf("%s group %d: %v", c.typ, c.group, err)
			continue
		}
		sd := res.Report.Consumers[0]
		all := strings.Join(append(sd.Problems, sd.Notes...), "; ")
		if sd.OK != c.ok || !strings.Contains(all, c.want) {
			t.Errorf("%s group %d: ok %v (%s), want ok %v and %q", c.typ, c.group, sd.OK, all, c.ok, c.want)
		}
	}
}

// comfyTextMaps are ComfyUI-GGUF's loader.py (795e451) renames from
// llama.cpp's names back to the ones its text encoders load (T5_SD_MAP,
// LLAMA_SD_MAP, applied in order to every name): the oracle for the names
// sdtool writes.
var comfyTextMaps = map[string][][2]string{
	"t5encoder": {{"enc.", "encoder."}, {".blk.", ".block."}, {"token_embd", "shared"}, {"output_norm", "final_layer_norm"},
		{"attn_q", "layer.0.SelfAttention.q"}, {"attn_k", "layer.0.SelfAttention.k"}, {"attn_v", "layer.0.SelfAttention.v"},
		{"attn_o", "layer.0.SelfAttention.o"}, {"attn_norm", "layer.0.layer_norm"}, {"attn_rel_b", "layer.0.SelfAttention.relative_attention_bias"},
		{"ffn_up", "layer.1.DenseReluDense.wi_1"}, {"ffn_down", "layer.1.DenseReluDense.wo"}, {"ffn_gate", "layer.1.DenseReluDense.wi_0"},
		{"ffn_norm", "layer.1.layer_norm"}},
	"llama": {{"blk.", "model.layers."}, {"attn_norm", "input_layernorm"}, {"attn_q_norm.", "self_attn.q_norm."},
		{"attn_k_norm.", "self_attn.k_norm."}, {"attn_v_norm.", "self_attn.v_norm."}, {"attn_q", "self_attn.q_proj"},
		{"attn_k", "self_attn.k_proj"}, {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"},
		{"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"}, {"ffn_gate", "mlp.gate_proj"},
		{"ffn_norm", "post_attention_layernorm"}, {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"},
		{"output.weight", "lm_head.weight"}},
}

// TestTextEncoderGGUFNames: a standalone T5, UMT5, Qwen3, Qwen2.5-VL,
// Llama 3 or Mistral quantized to GGUF gets llama.cpp's names, which ComfyUI-GGUF's renames
// turn back into the source names and sd.cpp's name conversion reads as
// the source's, and its llama.cpp architecture;
// --te-names sdcpp keeps the source names, and --target comfyui says that
// ComfyUI-GGUF cannot load that (nor a UMT5 without tokenizer metadata).
func TestTextEncoderGGUFNames(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ layout, arch, comfyMap, sdcppPrefix string }{
		{"layout-t5xxl", "t5encoder", "t5encoder", "text_encoders.t5xxl.transformer."},
		{"layout-umt5xxl", "t5encoder", "t5encoder", "text_encoders.t5xxl.transformer."},
		{"layout-qwen3", "qwen3", "llama", "text_encoders.llm."},
		{"layout-qwen2.5-vl", "qwen2vl", "llama", "text_encoders.llm."},
		{"layout-llama3", "llama", "llama", "text_encoders.llm."},
		{"layout-mistral", "llama", "llama", "text_encoders.llm."},
	} {
		tensors, err := synth.Descriptors(synth.Spec{Arch: c.layout, DType: formats.F16})
		if err != nil {
			t.Fatal(err)
		}
		in := layoutFile(t, dir, c.layout)
		res, err := quantizeRun(t.Context(), &Options{Input: in, Output: in + ".gguf", Type: "Q8_0", Targets: []string{TargetComfyUI}}, pipeline.Options{}, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := res.Header.Metadata.String("general.architecture"); got != c.arch {
			t.Errorf("%s: general.architecture %q, want %q", c.layout, got, c.arch)
		}
		var back []string
		for _, o := range res.Outputs {
			if strings.HasPrefix(o.Name, "model.") || strings.HasPrefix(o.Name, "encoder.") {
				t.Errorf("%s: %s keeps its Hugging Face name", c.layout, o.Name)
			}
			// sd.cpp (its name conversion, which package names follows)
			// reads llama.cpp's names as the source's.
			if got, want := names.Convert(c.sdcppPrefix+o.Name, names.Unknown), names.Convert(c.sdcppPrefix+o.Source.Name, names.Unknown); got != want {
				t.Errorf("%s: sd.cpp reads %s as %s, the source %s as %s", c.layout, o.Name, got, o.Source.Name, want)
			}
			n := o.Name
			for _, r := range comfyTextMaps[c.comfyMap] {
				n = strings.ReplaceAll(n, r[0], r[1])
			}
			back = append(back, n)
		}
		var want []string
		for _, x := range tensors {
			want = append(want, x.Name)
		}
		slices.Sort(back)
		slices.Sort(want)
		if !slices.Equal(back, want) {
			t.Errorf("%s: ComfyUI-GGUF would load %v, want %v", c.layout, back, want)
		}
		comfy := res.Report.Consumers[0]
		// UMT5 and Mistral need tokenizer metadata that a bare layout lacks.
		if needsTokenizer := c.layout == "layout-umt5xxl" || c.layout == "layout-mistral"; comfy.OK == needsTokenizer {
			t.Errorf("%s: comfyui ok %v %v", c.layout, comfy.OK, comfy.Problems)
		}
		res, err = quantizeRun(t.Context(), &Options{Input: in, Output: in + ".gguf", Type: "Q8_0", TextEncoderNames: "sdcpp", Targets: []string{TargetComfyUI}}, pipeline.Options{}, true)
		if err != nil {
			t.Fatal(err)
		}
		kept := slices.ContainsFunc(res.Outputs, func(o pipeline.Output) bool { return o.Name == tensors[0].Name })
		if !kept || res.Report.Consumers[0].OK {
			t.Errorf("%s --te-names sdcpp: source names kept %v, comfyui ok %v", c.layout, kept, res.Report.Consumers[0].OK)
		}
	}
}

// TestRealHeadersDryRun: on the tensor lists that model repositories
// publish (testdata/headers), a Q4_K_M dry run sees the family the list's
// case names, keeps every tensor the family table marks high precision
// and the case's own keep list unquantized, and quantizes the case's
// linear layers.
func TestRealHeadersDryRun(t *testing.T) {
	const dir = "../testdata/headers"
	lists, err := synth.ReadRealLists(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	for _, l := range lists {
		tensors, err := l.Descriptors(dir)
		if err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(tmp, strings.TrimSuffix(l.File, ".names.gz")+".safetensors")
		writeHeaderOnly(t, in, tensors, l.Meta)
		res, err := quantizeRun(t.Context(), &Options{Input: in, Output: filepath.Join(tmp, "out.gguf"), Type: "Q4_K_M"}, pipeline.Options{}, true)
		if err != nil {
			t.Errorf("%s: %v", l.File, err)
			continue
		}
		if res.Arch != l.Family {
			t.Errorf("%s: quantize saw %q, want %q", l.File, res.Arch, l.Family)
			continue
		}
		f := family.ByID(l.Family)
		if f.Kind == family.KindDiffusion {
			if got, _ := res.Header.Metadata.String("general.architecture"); got != f.ComfyArch {
				t.Errorf("%s: general.architecture %q, want %q", l.File, got, f.ComfyArch)
			}
		}
		var md formats.Metadata
		for k, v := range l.Meta {
			md = append(md, formats.KV{Key: k, Type: formats.TypeString, Value: v})
		}
		arch := family.Detect(tensors, md)
		to := map[string]formats.DType{}
		for _, o := range res.Outputs {
			to[o.Source.Name] = o.Type
			if _, cls := arch.Classify(o.Source.Name, o.Source.Shape); (cls.Keep != "" || cls.F32 != "") && o.Type.Quantized() {
				t.Errorf("%s: %s is %s (%s), want it kept in high precision", l.File, o.Source.Name, o.Type, o.Note)
			}
		}
		for _, n := range l.Keep {
			if typ, ok := to[n]; !ok || typ.Quantized() {
				t.Errorf("%s: %s is %v, want it kept in high precision", l.File, n, typ)
			}
		}
		for _, n := range l.Quantized {
			if typ := to[n]; !typ.Quantized() {
				t.Errorf("%s: %s is %v, want it quantized", l.File, n, typ)
			}
		}
	}
}

// TestDiTRolesFromRealNames: HiDream's text-stream V projection and its
// shared-expert and text FFN down projections get the mix's V and
// FFN-down upgrades as the image stream's do.
func TestDiTRolesFromRealNames(t *testing.T) {
	dir := t.TempDir()
	run := func(layout string) *planned {
		in := layoutFile(t, dir, layout)
		res, err := quantizeRun(t.Context(), &Options{Input: in, Output: in + ".gguf", Type: "Q4_K_M"}, pipeline.Options{}, true)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	hd := run("layout-hidream")
	img := rowOf(t, hd, "double_stream_blocks.0.block.attn1.to_v.weight")
	txt := rowOf(t, hd, "double_stream_blocks.0.block.attn1.to_v_t.weight")
	if img.To != txt.To || img.To == formats.Q4_K {
		t.Errorf("V projections: image %s (%s), text %s (%s); want one upgraded type", img.To, img.Reason, txt.To, txt.Reason)
	}
	exp := rowOf(t, hd, "double_stream_blocks.0.block.ff_i.experts.0.w2.weight")
	for _, n := range []string{"double_stream_blocks.0.block.ff_i.shared_experts.w2.weight", "double_stream_blocks.0.block.ff_t.w2.weight"} {
		if r := rowOf(t, hd, n); r.To != exp.To || r.Reason != exp.Reason {
			t.Errorf("%s: %s (%s), want %s (%s) as the experts' FFN down", n, r.To, r.Reason, exp.To, exp.Reason)
		}
	}
}
