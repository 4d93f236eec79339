package diffusers

import (
	"github.com/sdtool/sdtool/formats"
)

// IndexFile is the file that marks a diffusers pipeline folder.
const IndexFile = "model_index.json"

// Component is one sub-model of the pipeline and the prefix its tensor
// names get.
type Component struct {
	// Dir is the sub-folder ("unet").
	Dir string
	// Stem is the weight file name without its extension ("diffusion_pytorch_model").
	Stem string
	// Prefix is prepended to every tensor name ("unet.").
	Prefix string
	// Required makes a missing component an error.
	Required bool
	// Optional components are skipped silently when missing; the others
	// (neither Required nor Optional) with a warning, as sd.cpp warns.
	Optional bool
}

// Components lists the sub-models read, in output order, with sd.cpp's
// prefixes. Other sub-folders (scheduler, tokenizer, text_encoder_3, ...)
// are not read.
var Components = []Component{
	{Dir: "unet", Stem: "diffusion_pytorch_model", Prefix: "unet.", Required: true},
	{Dir: "vae", Stem: "diffusion_pytorch_model", Prefix: "vae."},
	{Dir: "text_encoder", Stem: "model", Prefix: "te."},
	{Dir: "text_encoder_2", Stem: "model", Prefix: "te.1.", Optional: true},
}

// binStem is the file stem transformers uses for .bin weights
// (pytorch_model.bin) where safetensors weights are called model.safetensors.
var binStem = map[string]string{"model": "pytorch_model"}

// ErrFormat is wrapped by every *formats.FormatError about a folder that
// is not a usable diffusers folder; it wraps formats.ErrFormat.
var ErrFormat = formats.Sentinel("diffusers: not a supported diffusers folder", formats.ErrFormat)

// formatError reports a problem of the folder found in file (tensor "" when
// no tensor is concerned).
func formatError(file, tensor, msg string) error {
	return &formats.FormatError{File: file, Tensor: tensor, Msg: msg, Err: ErrFormat}
}

// maxIndexSize bounds model_index.json and .bin index files read into memory.
const maxIndexSize = 16 << 20

func init() {
	formats.Register(formats.Opener{
		Name: "diffusers",
		// Only directories match, which no file format claims.
		Priority: 40,
		Match: func(path string, head []byte) bool {
			return head == nil && IsFolder(path)
		},
		Open: func(path string) (formats.Model, error) {
			m, err := Open(path)
			if err != nil {
				return nil, err
			}
			return m, nil
		},
	})
}
