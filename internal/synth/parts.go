package synth

import (
	"context"
	"io"
	"path/filepath"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

// partModel is a synthetic model that can be written as the component
// files people download (one per input flag) or as one file.
type partModel interface {
	Part(flag string) []TensorSpec
	EncodePart(w io.Writer, format, flag string) error
	EncodeSingle(w io.Writer, format string) error
}

// writeParts writes one file per flag whose part has tensors into dir as
// NAME-FLAG.EXT and returns the paths by flag; ext gives a flag's format
// ("gguf" or "safetensors").
func writeParts(m partModel, flags []string, dir, name string, ext func(flag string) string) (map[string]string, error) {
	out := map[string]string{}
	for _, flag := range flags {
		if len(m.Part(flag)) == 0 {
			continue
		}
		e := ext(flag)
		path := filepath.Join(dir, name+"-"+flag+"."+e)
		err := pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
			return m.EncodePart(w, e, flag)
		})
		if err != nil {
			return nil, err
		}
		out[flag] = path
	}
	return out, nil
}

// sameExt is the ext of writeParts for a model whose parts share one format.
func sameExt(ext string) func(string) string { return func(string) string { return ext } }

// writeSingle writes m as one file at path, in the format its extension names.
func writeSingle(m partModel, path string) error {
	cr, err := formats.CreatorFor(path)
	if err != nil {
		return err
	}
	return pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		return m.EncodeSingle(w, cr.Name)
	})
}

// typedModel is a partModel that says each tensor's stored type and the
// metadata of each component's file ("" for the single file).
type typedModel interface {
	Part(flag string) []TensorSpec
	typeOf(flag string, t TensorSpec) formats.DType
	Metadata(flag string) formats.Metadata
}

// encodeSingle writes the parts of flags into one file, each tensor under
// its flag's prefix.
func encodeSingle(w io.Writer, format string, m typedModel, flags []string, prefix map[string]string, seed int64) error {
	var ts []TensorSpec
	var names []string
	var types []formats.DType
	for _, flag := range flags {
		for _, t := range m.Part(flag) {
			types = append(types, m.typeOf(flag, t))
			names = append(names, prefix[flag]+t.Name)
			ts = append(ts, t)
		}
	}
	return encodeSpecs(w, format, ts, names, types, metadataFor(m.Metadata(""), format), seed)
}
