package pipeline

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant/convrot"
	"github.com/sdtool/sdtool/quant/mix"
)

// LookupSingleType parses the --type of a command that writes one ggml type
// (convert, an arithmetic merge) with formats.LookupType. A name that only
// sdtool quantize takes (a mix such as Q4_K_M, a ComfyUI type such as
// int8_convrot) is refused with what to write instead, how sdtool quantize
// takes it, and more (how this command can get there, "" for nothing); a
// typo gets suggestions among every name sdtool knows, mixes and ComfyUI
// types included.
func LookupSingleType(name, more string) (formats.DType, error) {
	if t, err := formats.LookupType(name); err == nil {
		return t, nil
	}
	if more != "" {
		more = "; " + more
	}
	if f, err := mix.Parse(name); err == nil && !f.Plain {
		return 0, fmt.Errorf("type %q is a mix of sdtool quantize (a type per tensor, mostly %s), and this command writes one type (--type %s, say): write the mix with `sdtool quantize IN -o OUT.gguf --type %s`%s",
			name, f.Base, f.Base, f.Name, more)
	}
	if ct, err := convrot.ParseType(name); err == nil {
		return 0, fmt.Errorf("type %q is a ComfyUI safetensors type: write it with `sdtool quantize IN -o OUT.safetensors --type %s`%s", name, ct, more)
	}
	return 0, formats.UnknownType(name, append(mix.Names(), convrot.Names()...))
}
