package mix

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// FType is a llama.cpp file type: the value of general.file_type.
type FType struct {
	// Name is llama.cpp's upper-case name ("Q4_K_M").
	Name string
	// ID is the general.file_type number.
	ID uint32
	// Base is the type most eligible tensors get.
	Base formats.DType
	// Level distinguishes the S/M/L variants of one base type: 'S', 'M', 'L' or 0.
	Level byte
	// Plain marks a single type with no mix upgrades (a ggml type name).
	Plain bool
}

// FTypes lists the mixes sdtool writes, in llama.cpp's numbering.
var FTypes = []FType{
	{Name: "F32", ID: 0, Base: formats.F32},
	{Name: "F16", ID: 1, Base: formats.F16},
	{Name: "Q4_0", ID: 2, Base: formats.Q4_0},
	{Name: "Q4_1", ID: 3, Base: formats.Q4_1},
	{Name: "Q8_0", ID: 7, Base: formats.Q8_0},
	{Name: "Q5_0", ID: 8, Base: formats.Q5_0},
	{Name: "Q5_1", ID: 9, Base: formats.Q5_1},
	{Name: "Q2_K", ID: 10, Base: formats.Q2_K},
	{Name: "Q3_K_S", ID: 11, Base: formats.Q3_K, Level: 'S'},
	{Name: "Q3_K_M", ID: 12, Base: formats.Q3_K, Level: 'M'},
	{Name: "Q3_K_L", ID: 13, Base: formats.Q3_K, Level: 'L'},
	{Name: "Q4_K_S", ID: 14, Base: formats.Q4_K, Level: 'S'},
	{Name: "Q4_K_M", ID: 15, Base: formats.Q4_K, Level: 'M'},
	{Name: "Q5_K_S", ID: 16, Base: formats.Q5_K, Level: 'S'},
	{Name: "Q5_K_M", ID: 17, Base: formats.Q5_K, Level: 'M'},
	{Name: "Q6_K", ID: 18, Base: formats.Q6_K},
	{Name: "IQ4_NL", ID: 25, Base: formats.IQ4_NL},
	{Name: "IQ4_XS", ID: 30, Base: formats.IQ4_XS},
	{Name: "BF16", ID: 32, Base: formats.BF16},
	{Name: "TQ1_0", ID: 36, Base: formats.TQ1_0},
	{Name: "TQ2_0", ID: 37, Base: formats.TQ2_0},
	{Name: "MXFP4", ID: 38, Base: formats.MXFP4},
}

// aliases maps llama.cpp's short names to their _M mix.
var aliases = map[string]string{"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}

// GuessedFType is llama.cpp's LLAMA_FTYPE_GUESSED flag, or-ed into
// general.file_type when the file type is not one of the named mixes.
const GuessedFType = 1024

// Parse finds a mix or a plain type. A ggml type name spelt exactly as ggml
// spells it ("q4_K", "q8_0", "iq4_xs") is that plain type, with no mix
// upgrades; otherwise llama.cpp's ftype names match case-insensitively
// ("Q4_K_M", "q5_k_s", and "Q4_K" = Q4_K_M as in llama.cpp), and any other
// ggml type name case-insensitively is the plain type.
func Parse(name string) (FType, error) {
	if t, ok := formats.TypeByName(name); ok {
		return plain(t)
	}
	up := strings.ToUpper(name)
	if a, ok := aliases[up]; ok {
		up = a
	}
	for _, f := range FTypes {
		if f.Name == up {
			return f, nil
		}
	}
	if t, ok := formats.ParseType(name); ok {
		return plain(t)
	}
	return FType{}, fmt.Errorf("%w (see `sdtool quantize --help` for the table)", formats.UnknownType(name, Names()))
}

// Names lists every name Parse accepts as spelt canonically: the mixes,
// their aliases and the ggml type names.
func Names() []string {
	out := formats.TypeNames()
	for _, f := range FTypes {
		out = append(out, f.Name)
	}
	for a := range aliases {
		out = append(out, a)
	}
	return out
}

// plain returns the FType of a single ggml type used for every eligible tensor.
func plain(t formats.DType) (FType, error) {
	if !t.IsGGML() {
		return FType{}, fmt.Errorf("type %s is not a ggml type", t)
	}
	if !t.InLinkedGGML() {
		return FType{}, fmt.Errorf("type %s is newer than the linked ggml: sd.cpp, ComfyUI-GGUF and llama.cpp cannot load it", t)
	}
	switch t {
	case formats.Q8_1, formats.Q8_K, formats.I8, formats.I16, formats.I32, formats.I64, formats.F64:
		return FType{}, fmt.Errorf("type %s is not a weight type that can be written", t)
	}
	return FType{Name: t.String(), ID: guessID(t), Base: t, Plain: true}, nil
}

// guessID returns llama.cpp's ftype number for a file whose weights are
// mostly of type t.
func guessID(t formats.DType) uint32 {
	ids := map[formats.DType]uint32{
		formats.IQ2_XXS: 19, formats.IQ2_XS: 20, formats.IQ3_XXS: 23, formats.IQ1_S: 24,
		formats.IQ3_S: 26, formats.IQ2_S: 28, formats.IQ1_M: 31,
	}
	if id, ok := ids[t]; ok {
		return id
	}
	// llama.cpp guesses the _M variant for a file of mostly one K type.
	id := uint32(GuessedFType)
	for _, f := range FTypes {
		if f.Base == t && (id == GuessedFType || f.Level == 'M') {
			id = f.ID
		}
	}
	return id
}
