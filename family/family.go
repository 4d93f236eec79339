// Package family is sdtool's model-family table: one entry per family of
// diffusion models, text encoders and VAEs, with how to recognise it from
// tensor names and shapes (and metadata), the components a checkpoint of it
// carries, which of its tensors stay in high precision and which are linear
// layers, the mix upgrades a quantizer gives it, the names
// stable-diffusion.cpp and ComfyUI-GGUF know it by, and whether sdtool's
// generate runs it.
//
// inspect, quantize (through quant/mix), lora and infer all read this table,
// so adding a family is adding an entry to Families (and a synthetic layout
// in internal/synth with a test), never a branch in code.
package family

import (
	"regexp"
	"slices"
	"strings"
)

// Component kinds.
const (
	KindDiffusion   = "diffusion"
	KindTextEncoder = "text_encoder"
	KindVAE         = "vae"
)

// Family is one model family.
type Family struct {
	// ID is the family's short name ("sd1", "flux", "t5xxl", "wan_vae").
	ID string
	// Title is its display name ("SD 1.x", "Flux.1").
	Title string
	// Kind is KindDiffusion, KindTextEncoder or KindVAE.
	Kind string
	// Detect lists the detection rules; each names the variant it finds
	// ("" for the family in general). The rule with the most conditions
	// wins among those of one kind that match, so specific rows refine
	// general ones.
	Detect []Rule
	// Parts are the components a single-file checkpoint of this family
	// carries besides its own, with their usual prefixes (documentation and
	// synthetic layouts; detection finds parts by prefix on its own).
	Parts []Part
	// Keep lists name fragments of tensors that stay in high precision in a
	// quantized file: embeddings, norms, modulation, gates, the first and
	// last layers. Matched with strings.Contains on the name without its
	// component prefix; a fragment starting with "^" must start it.
	Keep []string
	// F32 lists fragments of tensors stored in F32 (stable-diffusion.cpp
	// and ComfyUI-GGUF read them as F32 parameters; a BF16 or F16 copy
	// would be converted or refused).
	F32 []string
	// NotLinear lists fragments of 2-D ".weight" tensors that are not
	// linear layers (lookup tables, positional embeddings): they never
	// become ComfyUI quantized modules.
	NotLinear []string
	// ModuleKeep lists fragments of linear layers that stay float in a
	// ComfyUI INT8 module output (int8_convrot, int8) although a mix
	// quantizes them: the layers where the runtimes' W8A8 path (8-bit
	// activations) costs most, chosen by measurement (docs/families.md).
	ModuleKeep []string
	// Upgrades are the mix's per-role type upgrades (V projections, fused
	// qkv, FFN down, first/last blocks).
	Upgrades []Upgrade
	// ComfyArch is ComfyUI-GGUF's general.architecture for the family (""
	// when ComfyUI-GGUF has none).
	ComfyArch string
	// SDCpp is stable-diffusion.cpp's version name for it (names.Version's
	// spelling where names models it, sd.cpp's enum otherwise; "" when
	// sd.cpp has none).
	SDCpp string
	// SDCppAt lists the component prefixes under which sd.cpp's version
	// detection sees the family (nil: "model.diffusion_model." for a
	// diffusion model, nowhere for the rest). See sdcpp.go.
	SDCppAt []string
	// SDCppNeeds lists what else a file must hold for sd.cpp to name the
	// family's version; without it sd.cpp names none, or the one its text
	// encoder gives.
	SDCppNeeds []Need
	// GGUFNames, for a text encoder that ComfyUI-GGUF's text loader
	// reads, are the renames (Hugging Face fragment, llama.cpp fragment,
	// applied in order) that give llama.cpp's tensor names.
	GGUFNames [][2]string
	// GGUFArch is llama.cpp's general.architecture for a text encoder
	// written with GGUFNames when ComfyUI-GGUF has none for it ("" means
	// ComfyArch).
	GGUFArch string
	// PermuteHeads, for a llama-architecture decoder written with
	// GGUFNames, are the head and KV-head counts llama.cpp's converter
	// permutes the q and k rows for (its rotary layout); ComfyUI-GGUF
	// reverses that permutation when it loads the file. Zero: no
	// permutation.
	PermuteHeads [2]int
	// NormShift is added to every norm weight written with GGUFNames:
	// llama.cpp's converter bakes Gemma's (1 + w) RMS-norm scale into the
	// weights.
	NormShift float32
	// ReshapeConv reports that ComfyUI-GGUF reshapes the family's conv
	// kernels stored as rows (its shape_fix families: the UNets), so that
	// quantize --reshape-conv applies to it.
	ReshapeConv bool
	// Generate reports that sdtool's generate runs the family.
	Generate bool
	// Note is one line for docs/families.md (what differs, what is missing).
	Note string
}

// Part is one component of a checkpoint layout.
type Part struct {
	// Family is the component's family ID.
	Family string
	// Prefix is where its tensors live in the single-file checkpoint.
	Prefix string
}

// Upgrade roles.
const (
	RoleV         = "v_proj"     // attention V projections
	RoleQKV       = "fused_qkv"  // fused q/k/v projections
	RoleFFNDown   = "ffn_down"   // the MLPs' down projections
	RoleEdgeBlock = "edge_block" // the first and last transformer blocks
)

// Upgrade is one mix upgrade rule: tensors whose name matches Pattern take
// the mix's upgrade for Role. For RoleEdgeBlock, Pattern's first group is
// the block index.
type Upgrade struct {
	Role    string
	Pattern *regexp.Regexp
}

// Classes of a tensor for quantization.
type Class struct {
	// Keep is the fragment that keeps the tensor in high precision ("" when
	// none does).
	Keep string
	// F32 is the fragment that asks for F32 storage ("" when none does).
	F32 string
	// Linear reports a linear layer's weight: 2-D, named .weight, not a
	// norm and not on the NotLinear list.
	Linear bool
	// NotLinear names why a 2-D .weight tensor is not linear ("" when it is, or
	// when the tensor is not a 2-D .weight at all).
	NotLinear string
	// ModuleKeep is the fragment that keeps a linear layer float in ComfyUI
	// module outputs ("" when none does).
	ModuleKeep string
}

// Classify returns how family f treats the tensor called name (without its
// component prefix; Architecture.Classify strips it) with shape. f may be
// nil (an unrecognised model): then only the structural test applies.
func (f *Family) Classify(name string, shape []int64) Class {
	var c Class
	if f != nil {
		c.Keep = firstIn(name, f.Keep)
		c.F32 = firstIn(name, f.F32)
	}
	if len(shape) != 2 || !strings.HasSuffix(name, ".weight") {
		return c
	}
	switch {
	case strings.HasSuffix(name, "norm.weight"):
		c.NotLinear = "norm weight"
	case f != nil && firstIn(name, f.NotLinear) != "":
		c.NotLinear = "not a linear layer for " + f.ID + " (" + firstIn(name, f.NotLinear) + ")"
	default:
		c.Linear = true
		if f != nil {
			c.ModuleKeep = firstIn(name, f.ModuleKeep)
		}
	}
	return c
}

func firstIn(name string, frags []string) string {
	for _, s := range frags {
		if a, anchored := strings.CutPrefix(s, "^"); anchored && strings.HasPrefix(name, a) || !anchored && strings.Contains(name, s) {
			return s
		}
	}
	return ""
}

// ByID returns the family called id, or nil.
func ByID(id string) *Family {
	if i := index[id]; i > 0 {
		return Families[i-1]
	}
	return nil
}

// ByComfyArch returns the first diffusion family whose ComfyUI-GGUF
// architecture is arch, or nil.
func ByComfyArch(arch string) *Family {
	for _, f := range Families {
		if f.ComfyArch == arch && f.Kind == KindDiffusion {
			return f
		}
	}
	return nil
}

// Lookup returns the family named by id or, failing that, by ComfyUI-GGUF
// architecture name (older callers spoke those).
func Lookup(name string) *Family {
	if f := ByID(name); f != nil {
		return f
	}
	return ByComfyArch(name)
}

// IDs lists every family ID in table order.
func IDs() []string {
	out := make([]string, len(Families))
	for i, f := range Families {
		out[i] = f.ID
	}
	return out
}

// Generators lists the families generate runs.
func Generators() []string {
	var out []string
	for _, f := range Families {
		if f.Generate {
			out = append(out, f.ID)
		}
	}
	return out
}

// ReshapeConvIDs lists the families quantize --reshape-conv applies to.
func ReshapeConvIDs() []string {
	var out []string
	for _, f := range Families {
		if f.ReshapeConv {
			out = append(out, f.ID)
		}
	}
	return out
}

var index = map[string]int{}

func init() {
	for i, f := range Families {
		if index[f.ID] != 0 {
			panic("family: duplicate ID " + f.ID)
		}
		index[f.ID] = i + 1
	}
	buildRules()
}

// upgrades builds an upgrade list from role/pattern pairs.
func upgrades(pairs ...string) []Upgrade {
	out := make([]Upgrade, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Upgrade{Role: pairs[i], Pattern: regexp.MustCompile(pairs[i+1])})
	}
	return out
}

// with returns a copy of base with extra appended (table helper).
func with[T any](base []T, extra ...T) []T { return append(slices.Clone(base), extra...) }

func mustRE(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// LlamaName returns name as llama.cpp names the tensor (f.GGUFNames
// applied in order); name itself when f has no such table.
func (f *Family) LlamaName(name string) string {
	if f == nil {
		return name
	}
	for _, r := range f.GGUFNames {
		name = strings.Replace(name, r[0], r[1], 1)
	}
	return name
}

// LlamaArch returns the general.architecture of f's text encoder written
// with llama.cpp's names: GGUFArch, or else ComfyArch.
func (f *Family) LlamaArch() string {
	if f.GGUFArch != "" {
		return f.GGUFArch
	}
	return f.ComfyArch
}
