package lora

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// IsAdapter reports whether a tensor list is an adapter's: most of its
// names end in an adapter suffix (lora_up, lora_A, hada_w1_a, alpha, ...).
// A model checkpoint has none.
func IsAdapter(tensors []formats.Tensor) bool {
	n := 0
	for i := range tensors {
		if _, ok := findSuffix(tensors[i].Name); ok {
			n++
		}
	}
	return n > 0 && 2*n >= len(tensors)
}

// Summary describes an adapter for inspect.
type Summary struct {
	// Layers is the number of layers; Kinds counts them per kind.
	Layers int
	Kinds  map[Kind]int
	// Styles counts the layers per naming convention (see Adapter.Styles).
	Styles map[string]int
	// Parts counts the layers per part of the model they adapt ("unet"
	// for the denoiser, "te", "te1", "te2", "te3" for text encoders).
	Parts map[string]int
	// Ranks and Alphas are the distinct ranks and stored alphas, sorted.
	Ranks  []int64
	Alphas []float64
	// DoRA counts weight-decomposed layers.
	DoRA int
	// Family is the family-table ID (package family) the names and shapes
	// point to ("" when they do not tell).
	Family string
	// Refused and Unknown count the modules of refused kinds and the
	// tensors that are not adapter tensors.
	Refused, Unknown int
	// Notes are things a user should know ("the PEFT config in the
	// metadata scales by lora_alpha/r = 0.5, which sd.cpp, ComfyUI and
	// this bake ignore").
	Notes []string
}

// familyMarkers say which family (its family.ID) a module name belongs
// to, in order; the first row one of whose words occurs in some module
// wins. Names are compared with "." read as "_", so kohya and dotted names
// look alike, and a marker must start and end at a "_" (or the name's
// ends), so that "self_attn_o" is not read in CLIP's "self_attn_out_proj".
// A row of byContext is the UNet families, which share their module names:
// the cross-attention's context width tells them apart (unetContext).
var familyMarkers = []struct {
	any       []string
	id        string
	byContext bool
}{
	{[]string{"double_blocks", "single_blocks", "single_transformer_blocks", "img_attn_qkv", "proj_lora1"}, "flux", false},
	{[]string{"joint_blocks", "context_block"}, "sd3", false},
	{[]string{"noise_refiner", "context_refiner"}, "z_image", false},
	{[]string{"img_mlp", "txt_mlp", "img_mod"}, "qwen_image", false},
	{[]string{"cross_attn_k", "self_attn_o", "ffn_0", "ffn_2", "ffn_net_0_proj", "k_img", "lycoris_blocks", "lora_unet_blocks", "diffusion_model_blocks"}, "wan", false},
	{[]string{"lora_te2", "text_encoder_2", "label_emb", "add_embedding"}, "sdxl", false},
	{[]string{"input_blocks", "output_blocks", "middle_block", "down_blocks", "up_blocks", "mid_block"}, "sd1", true},
}

// unetContext tells the UNet families apart by the width of the text
// context their cross-attention keys read (the first, SD 1.x, when no layer
// says).
var unetContext = []struct {
	width int64
	id    string
}{{768, "sd1"}, {1024, "sd2"}, {2048, "sdxl"}}

// Summarize describes an adapter: its layers by kind, naming and part,
// ranks, alphas and the family it was made for.
func Summarize(a *Adapter) Summary {
	s := Summary{Layers: len(a.Layers), Kinds: map[Kind]int{}, Styles: map[string]int{}, Parts: map[string]int{},
		Refused: len(a.Refused), Unknown: len(a.Unknown)}
	for k, v := range a.Styles {
		s.Styles[k] = v
	}
	ranks, alphas := map[int64]bool{}, map[float64]bool{}
	var flat []string
	for _, l := range a.Layers {
		s.Kinds[l.Kind]++
		if l.Rank > 0 {
			ranks[l.Rank] = true
		}
		if l.HasAlpha {
			alphas[l.Alpha] = true
		}
		if l.DoRA {
			s.DoRA++
		}
		s.Parts[partOf(l.Module)]++
		flat = append(flat, strings.ReplaceAll(l.Module, ".", "_"))
	}
	for r := range ranks {
		s.Ranks = append(s.Ranks, r)
	}
	sort.Slice(s.Ranks, func(i, j int) bool { return s.Ranks[i] < s.Ranks[j] })
	for x := range alphas {
		s.Alphas = append(s.Alphas, x)
	}
	sort.Float64s(s.Alphas)
	s.Family = guessFamily(a, flat)
	s.Notes = peftNotes(a.model.Metadata())
	return s
}

// peftNotes reads the PEFT LoraConfig that diffusers' save_lora_adapter
// stores as JSON in the safetensors metadata: PEFT scales by lora_alpha/r
// (lora_alpha/√r with use_rslora), but the files carry no alpha tensors, so
// sd.cpp and ComfyUI (and a bake here, to agree with them) use scale 1. A
// config whose scale is not 1 is worth a note.
func peftNotes(meta formats.Metadata) []string {
	raw, ok := meta.String("lora_adapter_metadata")
	if !ok {
		return nil
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return []string{fmt.Sprintf("metadata lora_adapter_metadata is not JSON (%v)", err)}
	}
	var notes []string
	for k, v := range cfg {
		prefix, ok := strings.CutSuffix(k, "lora_alpha")
		if !ok {
			continue
		}
		alpha, ok1 := v.(float64)
		r, ok2 := cfg[prefix+"r"].(float64)
		if !ok1 || !ok2 || r <= 0 {
			continue
		}
		scale := alpha / r
		if rs, _ := cfg[prefix+"use_rslora"].(bool); rs {
			scale = alpha / math.Sqrt(r)
		}
		if scale != 1 {
			notes = append(notes, fmt.Sprintf("the PEFT config in the metadata (%slora_alpha %g, r %g) scales by %g; sd.cpp and ComfyUI use 1, and so does a bake (give the strength to match PEFT)", prefix, alpha, r, scale))
		}
	}
	sort.Strings(notes)
	return notes
}

// partOf names the model part a module belongs to by its head.
func partOf(module string) string {
	h, _ := findHead(module)
	switch h.comp {
	case "te.", "te1.", "te2.", "te3.":
		return strings.TrimSuffix(h.comp, ".")
	case "clip_l.":
		return "te1"
	case "clip_g.":
		return "te2"
	}
	if strings.HasPrefix(module, "text_encoders.t5xxl.") {
		return "te3"
	}
	return "unet"
}

func guessFamily(a *Adapter, flat []string) string {
	for _, fm := range familyMarkers {
		for _, m := range flat {
			if containsWord(m, fm.any) {
				if fm.byContext {
					return unetFamily(a)
				}
				return fm.id
			}
		}
	}
	return ""
}

// unetFamily reads the context width off a cross-attention key or value
// layer; a text encoder alone does not tell SD 1.x from its successors.
func unetFamily(a *Adapter) string {
	for _, l := range a.Layers {
		m := strings.ReplaceAll(l.Module, ".", "_")
		if strings.Contains(m, "attn2") && (strings.HasSuffix(m, "to_k") || strings.HasSuffix(m, "to_v")) {
			for _, u := range unetContext {
				if u.width == l.Cols {
					return u.id
				}
			}
		}
	}
	return unetContext[0].id
}

// containsWord reports whether one of words occurs in s between "_"
// boundaries.
func containsWord(s string, words []string) bool {
	for _, w := range words {
		for i := 0; ; {
			j := strings.Index(s[i:], w)
			if j < 0 {
				break
			}
			j += i
			end := j + len(w)
			if (j == 0 || s[j-1] == '_') && (end == len(s) || s[end] == '_') {
				return true
			}
			i = j + 1
		}
	}
	return false
}
