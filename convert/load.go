package convert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
)

// unusedPrefixes are the names sd.cpp treats as unused: a tensor whose name
// starts with one of them is dropped.
var unusedPrefixes = []string{
	"betas", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
	"log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
	"posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
	"cond_stage_model.transformer.text_model.embeddings.position_ids",
	"cond_stage_model.1.model.text_model.embeddings.position_ids",
	"cond_stage_model.transformer.vision_model.embeddings.position_ids", "cond_stage_model.model.logit_scale",
	"conditioner.embedders.0.transformer.text_model.embeddings.position_ids", "conditioner.embedders.0.model.logit_scale",
	"conditioner.embedders.1.model.logit_scale", "model.diffusion_model.time_embedding.cond_proj.weight",
	"unet.time_embedding.cond_proj.weight", "model_ema.decay", "model_ema.num_updates", "model_ema.diffusion_model",
	"embedding_manager", "denoiser.sigmas", "text_encoders.t5xxl.transformer.encoder.embed_tokens.weight", "ztsnr",
	"edm_vpred.sigma_min", "text_encoders.llm.output.weight", "text_encoders.llm.lm_head.",
}

// Unused reports whether sd.cpp drops a tensor of this name.
func Unused(name string) bool {
	for _, p := range unusedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Source is one tensor as sd.cpp's loader holds it before export.
type Source struct {
	// Name is the export name: prefixed (and converted with --convert-name).
	Name string
	// Model is the opened file the data comes from.
	Model formats.Model
	// Tensor is the stored tensor, in the model's own table (shared, not
	// copied: the plan's outputs point at it, and a copy per tensor kept
	// every Source alive through the run).
	Tensor *formats.Tensor
	// Storage is sd.cpp's in-memory type: F64→F32, I64→I32, F8→F16, others as stored.
	Storage formats.DType
	// Shape is the export shape in PyTorch order: 5-D folded to 4-D, 0-D as [1],
	// an int8_tensorwise [out,1] weight_scale as [out].
	Shape []int64
	// Folded records a shape change, for logging.
	Folded string
	// Int8Tensorwise marks a ComfyUI int8_tensorwise weight, never converted.
	Int8Tensorwise bool
}

// RowLength returns the innermost dimension of the export shape.
func (s *Source) RowLength() int64 { return s.Shape[len(s.Shape)-1] }

// Skipped is an input tensor that is not in the output.
type Skipped struct {
	// File and Tensor name the input tensor.
	File, Tensor string
	// Reason says why.
	Reason string
	// Unused marks tensors sd.cpp drops by design (schedule buffers, EMA
	// counters, position ids): expected, not a problem.
	Unused bool
}

// String returns "file: tensor "name": reason".
func (s Skipped) String() string { return fmt.Sprintf("%s: tensor %q: %s", s.File, s.Tensor, s.Reason) }

// Load lists the tensors of the inputs (one model per input flag, in
// family.ConvertInputs order; nil entries are skipped) the way sd.cpp builds its tensor
// map: safetensors tensors in byte-wise name order per file, GGUF in file
// order, U8 tensors skipped, unused tensors dropped, prefixes added, and a
// repeated name replacing the earlier tensor in the earlier position. It
// reports everything it skipped.
func Load(inputs map[string]formats.Model) ([]Source, []Skipped, error) {
	var out []Source
	var warnings []Skipped
	total := 0
	for _, m := range inputs {
		if m != nil {
			total += len(m.Tensors())
		}
	}
	out = make([]Source, 0, total)
	index := formats.NewNameIndex(total, func(i int) string { return out[i].Name })
	for _, c := range family.ConvertInputs() {
		m := inputs[c.Flag]
		if m == nil {
			continue
		}
		prefix := c.ConvertPrefix
		if m.Info().Format == "diffusers" {
			// sd.cpp names diffusers components itself (unet., vae., te.) and ignores the flag's prefix.
			prefix = ""
		}
		tensors := m.Tensors()
		for _, i := range loadOrder(m) {
			t := &tensors[i]
			if Unused(t.Name) {
				warnings = append(warnings, Skipped{t.File, t.Name, "unused by sd.cpp, dropped", true})
				continue
			}
			src, skip, err := newSource(m, t, prefix)
			if err != nil {
				return nil, warnings, err
			}
			if skip != "" {
				warnings = append(warnings, Skipped{t.File, t.Name, skip, false})
				continue
			}
			if Unused(src.Name) {
				warnings = append(warnings, Skipped{t.File, t.Name, fmt.Sprintf("%q is unused by sd.cpp, dropped", src.Name), true})
				continue
			}
			if i := index.Lookup(src.Name); i >= 0 {
				warnings = append(warnings, Skipped{out[i].Tensor.File, out[i].Tensor.Name, fmt.Sprintf("replaced by %q from %s (same name %q)", t.Name, t.File, src.Name), false})
				out[i] = src
				continue
			}
			out = append(out, src)
			index.Add(len(out) - 1)
		}
	}
	markInt8Tensorwise(out)
	return out, warnings, nil
}

// loadOrder returns the indexes of m's tensors in sd.cpp's load order:
// safetensors headers are parsed into a sorted map, so names come out in
// byte order per file (shards in order of first appearance in the sorted
// weight map); other formats keep file order. Sorting indexes rather than
// descriptors keeps a header of 500k tensors from being copied.
func loadOrder(m formats.Model) []int32 {
	list := m.Tensors()
	order := make([]int32, len(list))
	for i := range order {
		order[i] = int32(i)
	}
	byName := func(a, b int32) int { return strings.Compare(list[a].Name, list[b].Name) }
	switch m.Info().Format {
	case "safetensors":
		// One sorted weight map; shards in order of first appearance in it.
		slices.SortStableFunc(order, byName)
		groupByFile(list, order)
	case "diffusers":
		// Components in load order (unet, vae, te, te.1), each file sorted
		// like any safetensors file.
		groupByFile(list, order)
		for start := 0; start < len(order); {
			end := start
			for end < len(order) && list[order[end]].File == list[order[start]].File {
				end++
			}
			if strings.HasSuffix(list[order[start]].File, ".safetensors") {
				slices.SortStableFunc(order[start:end], byName)
			}
			start = end
		}
	}
	return order
}

// groupByFile stable-sorts order (indexes into list) by the first position
// of each tensor's file in order.
func groupByFile(list []formats.Tensor, order []int32) {
	firstSeen := map[string]int{}
	for i, k := range order {
		if _, ok := firstSeen[list[k].File]; !ok {
			firstSeen[list[k].File] = i
		}
	}
	if len(firstSeen) < 2 {
		return
	}
	slices.SortStableFunc(order, func(a, b int32) int { return firstSeen[list[a].File] - firstSeen[list[b].File] })
}

func newSource(m formats.Model, t *formats.Tensor, prefix string) (Source, string, error) {
	s := Source{Model: m, Tensor: t, Name: t.Name, Storage: t.Type}
	if !strings.HasPrefix(s.Name, prefix) {
		s.Name = prefix + s.Name
	}
	switch t.Type {
	case formats.U8:
		return s, "U8 tensor skipped (sd.cpp does not load U8)", nil
	case formats.F64:
		s.Storage = formats.F32
	case formats.I64:
		s.Storage = formats.I32
	case formats.F8_E4M3, formats.F8_E5M2:
		s.Storage = formats.F16
	case formats.F32, formats.F16, formats.BF16, formats.I32, formats.I8:
	default:
		if !t.Type.IsGGML() {
			return s, "", fmt.Errorf("%s: tensor %q: dtype %s is not supported by sd.cpp's loader", t.File, t.Name, t.Type)
		}
	}
	shape := t.Shape // shared with the model's descriptor unless changed; never modified in place
	switch {
	case len(shape) == 0:
		shape = []int64{1}
	case len(shape) == 5:
		shape = []int64{shape[0] * shape[1], shape[2], shape[3], shape[4]}
		s.Folded = fmt.Sprintf("5-D shape %v folded to %v as sd.cpp does", t.Shape, shape)
	case len(shape) > 5:
		return s, "", fmt.Errorf("%s: tensor %q: %d dimensions (sd.cpp supports at most 5)", t.File, t.Name, len(shape))
	}
	s.Shape = shape
	return s, "", nil
}

// markInt8Tensorwise flags ComfyUI int8_tensorwise modules: an I8 `.weight`
// with a `.weight_scale` beside it. The weight is never converted and a
// per-row [out,1] scale is stored 1-D, as sd.cpp does.
func markInt8Tensorwise(list []Source) {
	if !slices.ContainsFunc(list, func(s Source) bool { return s.Storage == formats.I8 }) {
		return // no int8 weight: no name index needed
	}
	byName := make(map[string]int, len(list))
	for i := range list {
		byName[list[i].Name] = i
	}
	for i := range list {
		s := &list[i]
		if s.Storage != formats.I8 || !strings.HasSuffix(s.Name, ".weight") {
			continue
		}
		j, ok := byName[s.Name+"_scale"]
		if !ok {
			continue
		}
		s.Int8Tensorwise = true
		sc := &list[j]
		if len(sc.Shape) == 2 && sc.Shape[1] == 1 {
			sc.Folded = fmt.Sprintf("int8_tensorwise scale %v stored 1-D", sc.Shape)
			sc.Shape = []int64{sc.Shape[0]}
		}
	}
}
