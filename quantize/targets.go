package quantize

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/pipeline"
)

// Consumer names for --target.
const (
	TargetSDCpp   = "sdcpp"
	TargetComfyUI = "comfyui"
	TargetGGML    = "ggml"
)

// AllTargets lists the consumers --target accepts, in report order.
var AllTargets = []string{TargetSDCpp, TargetComfyUI, TargetGGML}

// comfyTypes are the types ComfyUI-GGUF has dequantizers for (its
// dequant.py at 795e451, December 2025), besides F32 and F16 that it loads
// as they are.
var comfyTypes = map[formats.DType]bool{
	formats.F32: true, formats.F16: true, formats.BF16: true, formats.Q8_0: true, formats.Q5_1: true,
	formats.Q5_0: true, formats.Q4_1: true, formats.Q4_0: true, formats.Q6_K: true, formats.Q5_K: true,
	formats.Q4_K: true, formats.Q3_K: true, formats.Q2_K: true, formats.IQ4_NL: true, formats.IQ4_XS: true,
}

// Consumer says whether one program can load the output, and why not.
type Consumer struct {
	// Name is "sdcpp", "comfyui" or "ggml".
	Name string `json:"name"`
	// OK reports that nothing found stops the consumer from loading the file.
	OK bool `json:"ok"`
	// Problems lists what stops it (empty when OK).
	Problems []string `json:"problems,omitempty"`
	// Notes lists what works but deserves a word (compatibility modes).
	Notes []string `json:"notes,omitempty"`
}

// ParseTargets reads --target values (repeatable, comma-separated; "all"
// or none means every consumer).
func ParseTargets(values []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			t = strings.ToLower(strings.TrimSpace(t))
			switch t {
			case "":
				continue
			case "all":
				for _, a := range AllTargets {
					seen[a] = true
				}
				continue
			case TargetSDCpp, TargetComfyUI, TargetGGML:
				seen[t] = true
			default:
				return nil, option.Errorf("%s %q: want sdcpp, comfyui, ggml or all", option.Name("Targets"), t)
			}
		}
	}
	for _, a := range AllTargets {
		if seen[a] || len(seen) == 0 {
			out = append(out, a)
		}
	}
	return out, nil
}

// checkConsumers evaluates the planned output for each target.
func checkConsumers(r *Report, plan *pipeline.Plan, targets []string) []Consumer {
	var out []Consumer
	for _, name := range targets {
		c := Consumer{Name: name}
		if r.Format == "safetensors" {
			checkSafetensors(r, &c)
		} else {
			checkGGUF(r, plan, &c)
		}
		c.OK = len(c.Problems) == 0
		out = append(out, c)
	}
	return out
}

func checkGGUF(r *Report, plan *pipeline.Plan, c *Consumer) {
	maxName := map[string]int{TargetGGML: gguf.GGMLMaxName - 1, TargetSDCpp: gguf.SDCppMaxName, TargetComfyUI: gguf.ComfyGGUFMaxName}[c.Name]
	var long, longest, deep int
	bad := map[formats.DType]int{}
	for _, row := range plan.Outputs {
		if n := len(row.Name); n > maxName {
			long++
			longest = max(longest, n)
		}
		if len(row.Shape) > 4 {
			deep++
		}
		if c.Name == TargetComfyUI && !comfyTypes[row.Type] && row.Type.Quantized() {
			bad[row.Type]++
		}
		if c.Name != TargetComfyUI && !row.Type.InLinkedGGML() {
			bad[row.Type]++
		}
	}
	if long > 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("%s longer than %d bytes (longest %d)", pipeline.Count(long, "tensor name", "tensor names"), maxName, longest))
	}
	if deep > 0 && c.Name != TargetComfyUI {
		c.Problems = append(c.Problems, fmt.Sprintf("%s with more than 4 dims", pipeline.Count(deep, "tensor", "tensors")))
	}
	if len(bad) > 0 {
		var parts []string
		for _, t := range sortedTypes(bad) {
			parts = append(parts, fmt.Sprintf("%s (%s)", t, pipeline.Count(bad[t], "tensor", "tensors")))
		}
		what := "types it cannot dequantize: "
		if c.Name != TargetComfyUI {
			what = "types newer than the linked ggml: "
		}
		c.Problems = append(c.Problems, what+strings.Join(parts, ", "))
	}
	switch c.Name {
	case TargetSDCpp:
		if n := r.rowsOf256; n > 0 {
			c.Problems = append(c.Problems, fmt.Sprintf("%s reshaped by --reshape-conv (sd.cpp expects the original shapes)", pipeline.Count(n, "tensor", "tensors")))
		}
	case TargetComfyUI:
		f := family.ByID(r.Arch)
		switch {
		case f != nil && f.Kind == family.KindTextEncoder && !r.LlamaNames:
			// ComfyUI-GGUF 795e451's text loader refuses a GGUF without a
			// llama.cpp architecture and maps llama.cpp names only.
			c.Problems = append(c.Problems, fmt.Sprintf("ComfyUI-GGUF's text-encoder loader needs llama.cpp tensor names and architecture, which sdtool writes for T5, UMT5, Qwen3, Qwen2.5-VL, Llama 3 and Mistral (--te-names llama.cpp); %s is written with its own names", f.Title))
		case f != nil && f.Kind == family.KindTextEncoder && f.ComfyArch == "":
			// TXT_ARCH_LIST in loader.py 795e451; the unmerged gemma_tenc
			// branch (bf8cb71) adds gemma2, not gemma3.
			c.Problems = append(c.Problems, fmt.Sprintf("ComfyUI-GGUF's text-encoder loader has no %s architecture (it reads t5, t5encoder, llama, qwen2vl, qwen3 and qwen3vl)", r.ComfyArch))
		case r.ComfyArch == "":
			c.Notes = append(c.Notes, "no general.architecture: ComfyUI-GGUF detects the model from its tensor names (compatibility mode)")
		}
		if r.Arch == "mistral" && r.LlamaNames {
			// loader.py 795e451 builds Mistral's Tekken tokenizer from a
			// gpt2-model token list when the token embedding is 131072x5120.
			if m, _ := plan.Header.Metadata.String("tokenizer.ggml.model"); m != "gpt2" || !hasKey(plan, "tokenizer.ggml.tokens") || !hasKey(plan, "tokenizer.ggml.token_type") {
				c.Problems = append(c.Problems, "ComfyUI-GGUF rebuilds Mistral's Tekken tokenizer from tokenizer.ggml.model \"gpt2\", tokenizer.ggml.tokens and tokenizer.ggml.token_type, which the input does not carry (give --tokenizer with its tokenizer.json)")
			}
		}
		if r.Arch == "umt5xxl" && r.LlamaNames {
			if _, ok := plan.Header.Metadata.Get("tokenizer.ggml.tokens"); !ok {
				c.Problems = append(c.Problems, "ComfyUI-GGUF rebuilds UMT5's tokenizer from tokenizer.ggml.* metadata, which the input does not carry")
			}
		}
	}
}

func checkSafetensors(r *Report, c *Consumer) {
	switch c.Name {
	case TargetGGML:
		c.Problems = append(c.Problems, "the output is safetensors, not GGUF")
	case TargetComfyUI:
		c.Notes = append(c.Notes, "comfy_quant layers ("+r.Type+")")
		c.Notes = append(c.Notes, comfyFormatNotes(r.modules, r.inputScales)...)
	case TargetSDCpp:
		// Checked against stable-diffusion.cpp 97d2990 (its
		// docs/int8_convrot.md and safetensors reader): int8_tensorwise
		// modules, with or without convrot, run natively (the group size
		// must be a power of four, which convrot already enforces);
		// FP8 weights are
		// widened to f16 at load, but a tensor-wise weight_scale is applied
		// only by the layers that opt in (Ideogram 4's in that version).
		if n := r.modules[convrot.Int8Convrot.String()] + r.modules[convrot.Int8.String()]; n > 0 {
			c.Notes = append(c.Notes, fmt.Sprintf("%d int8_tensorwise layers run natively (sd.cpp 97d2990 and later)", n))
		}
		if n := r.modules[convrot.FP8E4M3.String()] + r.modules[convrot.FP8E5M2.String()]; n > 0 {
			c.Problems = append(c.Problems, fmt.Sprintf("%d FP8 layers with a tensor-wise weight_scale: sd.cpp 97d2990 loads FP8 weights but applies weight_scale only in Ideogram 4's layers, so other models' outputs would be off by the scale", n))
		}
		for _, t := range []convrot.Type{convrot.NVFP4, convrot.MXFP8, convrot.W4A4, convrot.W4A8} {
			if n := r.modules[t.String()]; n > 0 {
				c.Problems = append(c.Problems, fmt.Sprintf("%d %s layers: sd.cpp 97d2990 does not know the format", n, t))
			}
		}
	}
}

func sortedTypes(m map[formats.DType]int) []formats.DType {
	out := make([]formats.DType, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func hasKey(plan *pipeline.Plan, key string) bool {
	_, ok := plan.Header.Metadata.Get(key)
	return ok
}

// comfyFormats says, per comfy_quant format sdtool writes beyond INT8 and
// FP8, which ComfyUI first loads it and how it runs. Sources: ComfyUI pull
// requests #11635 (nvfp4, merged 2026-01-06), #12907 (mxfp8, in v0.18.0)
// and #15308 (asym_w4a8_int8, in v0.31.0); convrot_w4a4 is known to load in
// v0.30.0 (its first release was not checked).
var comfyFormats = map[string]string{
	"nvfp4":          "nvfp4 needs a ComfyUI from January 2026 or later (PR #11635) with comfy-kitchen; FP4 matmuls on Blackwell GPUs, elsewhere (CPU included) it dequantizes to the compute dtype",
	"mxfp8":          "mxfp8 needs ComfyUI v0.18.0 or later; FP8 block-scaled matmuls on Blackwell GPUs (torch 2.10 or later), elsewhere it dequantizes",
	"convrot_w4a4":   "convrot_w4a4 needs ComfyUI v0.30.0 or later (comfy-kitchen's TensorCoreConvRotW4A4Layout); activations are rotated and quantized to int4 per row at run time",
	"asym_w4a8_int8": "asym_w4a8_int8 needs ComfyUI v0.31.0 or later; the 4-bit codes are widened to int8 and run as rotated W8A8",
}

// comfyFormatNotes lists the ComfyUI version each written format needs and,
// for the float formats that can quantize activations (fp8, nvfp4), how
// many layers got an input_scale calibrated from the imatrix and what
// ComfyUI does for those without one.
func comfyFormatNotes(modules map[string]int, calibrated int) []string {
	var out []string
	for _, f := range []string{"nvfp4", "mxfp8", "convrot_w4a4", "asym_w4a8_int8"} {
		if n := modules[f]; n > 0 {
			out = append(out, fmt.Sprintf("%d %s layers: %s", n, f, comfyFormats[f]))
		}
	}
	fp8 := modules[convrot.FP8E4M3.String()] + modules[convrot.FP8E5M2.String()]
	scaled := fp8 + modules["nvfp4"]
	if calibrated > 0 {
		out = append(out, fmt.Sprintf("input_scale calibrated from the imatrix's activation maxima for %d of %d fp8/nvfp4 layers (ComfyUI uses it where it computes in FP8 or FP4)", calibrated, scaled))
	}
	if calibrated == scaled {
		return out
	}
	missing := "no input_scale is written"
	if calibrated > 0 {
		missing = "the other layers have no input_scale (no activation maximum in the imatrix)"
	}
	if fp8 > 0 {
		out = append(out, missing+": on GPUs that compute in FP8, ComfyUI then quantizes fp8 layers' activations with scale 1, so activations beyond ±448 (e4m3) saturate; generate --imatrix-out to a .gguf records the maxima that calibrate it")
	}
	if modules["nvfp4"] > 0 {
		out = append(out, missing+": on Blackwell GPUs ComfyUI then computes nvfp4 layers' activation tensor scale (amax/2688) on every call")
	}
	return out
}

// MarkSplit records that the output is written as shards: sd.cpp
// (97d2990), ComfyUI-GGUF and ComfyUI's safetensors loaders open one file
// and would miss the other shards' tensors (llama.cpp's loader, through
// ggml's gguf reader, reads every shard of a split GGUF).
func (r *Report) MarkSplit() {
	for i := range r.Consumers {
		c := &r.Consumers[i]
		if c.Name == TargetSDCpp || c.Name == TargetComfyUI {
			c.Problems = append(c.Problems, "written as shards, and it reads one file (join them with sdtool split --merge)")
			c.OK = false
		}
	}
}
