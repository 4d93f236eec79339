package mix

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
)

// LookupSingleType parses the --type of a command that writes one ggml type
// (convert, an arithmetic merge) with formats.LookupType. A name that only
// sdtool quantize takes, a mix such as Q4_K_M or one of comfy (the ComfyUI
// type names, such as int8_convrot), is refused with what to write
// instead, how sdtool quantize takes it, and more (how this command can get
// there, "" for nothing); a typo gets suggestions among every name sdtool
// knows, mixes and ComfyUI types included.
func LookupSingleType(name string, comfy []string, more string) (formats.DType, error) {
	if t, err := formats.LookupType(name); err == nil {
		return t, nil
	}
	if more != "" {
		more = "; " + more
	}
	if f, err := Parse(name); err == nil && !f.Plain {
		return 0, option.Errorf("type %q is a mix of sdtool quantize (a type per tensor, mostly %s), and this command writes one type (%s %s, say): write the mix with `sdtool quantize IN -o OUT.gguf --type %s`%s",
			name, f.Base, option.Name("Type"), f.Base, f.Name, more)
	}
	if i := slices.IndexFunc(comfy, func(c string) bool { return strings.EqualFold(c, name) }); i >= 0 {
		return 0, fmt.Errorf("type %q is a ComfyUI safetensors type: write it with `sdtool quantize IN -o OUT.safetensors --type %s`%s", name, comfy[i], more)
	}
	return 0, formats.UnknownType(name, append(Names(), comfy...))
}
