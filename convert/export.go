package convert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// Naming schemes ExportPlan writes.
const (
	NamesKeep      = "keep"      // the names as stored
	NamesLDM       = "ldm"       // a single-file checkpoint's: a bare diffusion model gets model.diffusion_model.
	NamesComfyUI   = "comfyui"   // ComfyUI's diffusion_models/ layout: a diffusion model alone loses model.diffusion_model.
	NamesSDCpp     = "sdcpp"     // stable-diffusion.cpp's internal names (convert --convert-name)
	NamesDiffusers = "diffusers" // a diffusers UNet's (SD 1.x, 2.x, XL UNet files only)
)

// NameSchemes lists the --names values ExportPlan takes.
var NameSchemes = []string{NamesComfyUI, NamesDiffusers, NamesLDM, NamesSDCpp, NamesKeep}

// diffusionPrefix is the diffusion model's prefix in single-file checkpoints.
const diffusionPrefix = "model.diffusion_model."

// ExportOptions are the choices of ExportPlan.
type ExportOptions struct {
	// Names is one of NameSchemes.
	Names string
	// DType is the float type quantized tensors are decoded to (F16, BF16
	// or F32); float tensors keep their type and bytes.
	DType formats.DType
}

// ExportPlan returns the plan that writes m (any model sdtool reads,
// usually a GGUF) to out as safetensors: float and integer tensors copied
// byte for byte, quantized ones (ggml types, ComfyUI modules) decoded to
// o.DType, ComfyUI-GGUF's reshaped tensors given back their recorded
// shape, names in o.Names' scheme, and the string metadata carried.
func ExportPlan(m formats.Model, out string, o ExportOptions) (*pipeline.Plan, error) {
	creator, err := formats.CreatorFor(out)
	if err != nil || creator.Name != "safetensors" {
		return nil, fmt.Errorf("%s: export writes .safetensors", out)
	}
	if o.DType != formats.F16 && o.DType != formats.BF16 && o.DType != formats.F32 {
		return nil, fmt.Errorf("export: decode to f16, bf16 or f32, not %s", o.DType)
	}
	view, err := tensor.NewView(m)
	if err != nil {
		return nil, err
	}
	list := make([]string, len(view.Sources))
	for i, s := range view.Sources {
		list[i] = s.Name
	}
	renamed, err := exportNames(m, list, o.Names)
	if err != nil {
		return nil, err
	}
	meta, _ := pipeline.CarryMetadata(m.Metadata(), "safetensors")
	plan := &pipeline.Plan{Path: out, Format: creator, Header: formats.WriteOptions{Metadata: meta}}
	plan.Use(m)
	enc, err := quant.Encoder(o.DType)
	if err != nil {
		return nil, err
	}
	for i, s := range view.Sources {
		outp := pipeline.Output{Name: renamed[i], Type: s.Tensor.Type, Shape: s.Shape(), Source: &s.Tensor, Note: "copied"}
		if s.Quantized() || !creator.Stores(s.Tensor.Type) {
			if err := s.Err(); err != nil {
				return nil, err
			}
			outp.Type, outp.Note = o.DType, "decoded"
			outp.Producer = pipeline.Convert(s, o.DType, pipeline.EncodeRows(o.DType, enc.Quantize, nil))
		} else {
			outp.Producer = pipeline.Copy(m, s.Tensor)
		}
		plan.Outputs = append(plan.Outputs, outp)
	}
	return plan, nil
}

// exportNames returns the names of list in scheme, refusing two tensors
// that would get one name.
func exportNames(m formats.Model, list []string, scheme string) ([]string, error) {
	arch := family.Detect(m.Tensors(), m.Metadata())
	out := slices.Clone(list)
	switch scheme {
	case NamesKeep:
	case NamesSDCpp:
		return names.ConvertAll(list, version(arch))
	case NamesLDM:
		if bareDiffusion(arch) {
			for i, n := range out {
				out[i] = diffusionPrefix + n
			}
		}
	case NamesComfyUI:
		if diffusionOnly(arch) {
			for i, n := range out {
				out[i] = strings.TrimPrefix(n, diffusionPrefix)
			}
		}
	case NamesDiffusers:
		return diffusersNames(arch, list)
	default:
		return nil, option.Errorf("%s %q: want one of %s", option.Name("Names"), scheme, strings.Join(NameSchemes, ", "))
	}
	seen := make(map[string]string, len(out))
	for i, n := range out {
		if prev, dup := seen[n]; dup {
			return nil, fmt.Errorf("tensors %q and %q would both be named %q", prev, list[i], n)
		}
		seen[n] = list[i]
	}
	return out, nil
}

// version is the sd.cpp version of a: the one sd.cpp detects, or for a
// diffusion model alone (where sd.cpp needs a text encoder to tell), its
// family's.
func version(a family.Architecture) names.Version {
	if v := names.VersionOf(a); v != names.Unknown {
		return v
	}
	return names.Lookup(a.SDCppModel())
}

// bareDiffusion reports a diffusion model stored without a prefix (as
// ComfyUI-GGUF's and city96's files are).
func bareDiffusion(a family.Architecture) bool {
	return len(a.Components) == 1 && a.Components[0].Kind == "diffusion" && a.Components[0].Prefix == ""
}

// diffusionOnly reports a file that holds a diffusion model and nothing else.
func diffusionOnly(a family.Architecture) bool {
	return len(a.Components) == 1 && a.Components[0].Kind == "diffusion" && a.Unassigned == 0
}

// diffusersNames gives a UNet's tensors their diffusers names (those of a
// diffusers folder's unet/diffusion_pytorch_model.safetensors).
func diffusersNames(a family.Architecture, list []string) ([]string, error) {
	v := version(a)
	if !v.IsUNet() || !diffusionOnly(a) {
		return nil, option.Errorf("%s diffusers: only the UNet of SD 1.x, 2.x and XL is mapped to diffusers names, alone in its file (this is %s)", option.Name("Names"), a.Name)
	}
	out := make([]string, len(list))
	for i, n := range list {
		d, ok := names.DiffusersUNetName(strings.TrimPrefix(n, diffusionPrefix), v)
		if !ok {
			return nil, fmt.Errorf("tensor %q: no diffusers name for it", n)
		}
		out[i] = d
	}
	return out, nil
}
