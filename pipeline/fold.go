package pipeline

import (
	"fmt"
	"slices"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// FoldHighDims makes a GGUF plan readable by ggml and stable-diffusion.cpp:
// every output with more than four dims (Wan's Conv3d kernels, [out, in, t,
// h, w]) is stored with its leading dims multiplied together down to four,
// [out·in, t, h, w] as sd-cli's convert stores a 5-D kernel, and its torch
// shape goes into comfy.gguf.orig_shape.<name>, which ComfyUI-GGUF and
// sdtool read back. The bytes do not change (the row dim stays last). ggml's
// reader refuses more than four dims, and sd.cpp's fallback reader stops at
// any array in the metadata, so a 5-D GGUF with a tokenizer or an orig_shape
// key is refused by both. Other formats are left as they are; it returns
// the number of outputs folded.
func FoldHighDims(p *Plan) int {
	if p.Format.Name != "gguf" {
		return 0
	}
	n := 0
	for i := range p.Outputs {
		o := &p.Outputs[i]
		if len(o.Shape) <= gguf.GGMLMaxDims {
			continue
		}
		torch := slices.Clone(o.Shape)
		lead := int64(1)
		for _, d := range torch[:len(torch)-gguf.GGMLMaxDims+1] {
			lead *= d
		}
		o.Shape = append([]int64{lead}, torch[len(torch)-gguf.GGMLMaxDims+1:]...)
		if o.Note != "" {
			o.Note += "; "
		}
		o.Note += fmt.Sprintf("%d-D shape folded to %v (comfy.gguf.orig_shape keeps %v)", len(torch), o.Shape, torch)
		dims := make([]int32, len(torch))
		for j, d := range torch {
			dims[j] = int32(d)
		}
		setKV(&p.Header.Metadata, formats.KV{Key: gguf.OrigShapePrefix + o.Name, Type: formats.TypeArray,
			Value: formats.Array{Elem: formats.TypeInt32, Values: dims}})
		n++
	}
	return n
}

// setKV replaces the entry of kv's key where it stands, or appends kv.
func setKV(md *formats.Metadata, kv formats.KV) {
	for i := range *md {
		if (*md)[i].Key == kv.Key {
			(*md)[i] = kv
			return
		}
	}
	*md = append(*md, kv)
}
