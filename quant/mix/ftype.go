// Package mix decides which type each tensor gets when `sdtool quantize`
// writes a llama.cpp-style mix (Q4_K_M, Q5_K_S, ...) for a diffusion model:
// the ftype table, eligibility, per-architecture never-quantize lists, the
// image-model upgrades of V projections, fused qkv and FFN-down weights,
// user rules and the row-size fallback.
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
}

// FTypes lists the mixes sdtool writes, in llama.cpp's numbering.
var FTypes = []FType{
	{"F32", 0, formats.F32, 0},
	{"F16", 1, formats.F16, 0},
	{"Q4_0", 2, formats.Q4_0, 0},
	{"Q4_1", 3, formats.Q4_1, 0},
	{"Q8_0", 7, formats.Q8_0, 0},
	{"Q5_0", 8, formats.Q5_0, 0},
	{"Q5_1", 9, formats.Q5_1, 0},
	{"Q2_K", 10, formats.Q2_K, 0},
	{"Q3_K_S", 11, formats.Q3_K, 'S'},
	{"Q3_K_M", 12, formats.Q3_K, 'M'},
	{"Q3_K_L", 13, formats.Q3_K, 'L'},
	{"Q4_K_S", 14, formats.Q4_K, 'S'},
	{"Q4_K_M", 15, formats.Q4_K, 'M'},
	{"Q5_K_S", 16, formats.Q5_K, 'S'},
	{"Q5_K_M", 17, formats.Q5_K, 'M'},
	{"Q6_K", 18, formats.Q6_K, 0},
	{"IQ4_NL", 25, formats.IQ4_NL, 0},
	{"IQ4_XS", 30, formats.IQ4_XS, 0},
	{"BF16", 32, formats.BF16, 0},
	{"TQ1_0", 36, formats.TQ1_0, 0},
	{"TQ2_0", 37, formats.TQ2_0, 0},
	{"MXFP4", 38, formats.MXFP4, 0},
}

// aliases maps llama.cpp's short names to their _M mix.
var aliases = map[string]string{"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}

// GuessedFType is llama.cpp's LLAMA_FTYPE_GUESSED flag, or-ed into
// general.file_type when the file type is not one of the named mixes.
const GuessedFType = 1024

// Parse finds a mix by llama.cpp ftype name (case-insensitive: "q4_k_m",
// "Q4_K" = Q4_K_M) or by a ggml type name used as it is ("q4_K" is the
// Q4_K_M mix only when written in upper case; "iq2_xxs" is a pure type).
// Plain ggml types get a mix with no upgrades (Level 0) and the ftype that
// llama.cpp would guess for them.
func Parse(name string) (FType, error) {
	up := strings.ToUpper(name)
	if a, ok := aliases[up]; ok {
		up = a
	}
	for _, f := range FTypes {
		if f.Name == up {
			return f, nil
		}
	}
	if t, ok := formats.ParseType(name); ok && t.IsGGML() {
		if !t.InLinkedGGML() {
			return FType{}, fmt.Errorf("type %s is newer than the linked ggml: sd.cpp, ComfyUI-GGUF and llama.cpp cannot load it", t)
		}
		switch t {
		case formats.Q8_1, formats.Q8_K, formats.I8, formats.I16, formats.I32, formats.I64, formats.F64:
			return FType{}, fmt.Errorf("type %s is not a weight type that can be written", t)
		}
		return FType{Name: strings.ToUpper(t.String()), ID: guessID(t), Base: t}, nil
	}
	return FType{}, fmt.Errorf("unknown quantization type %q (see `sdtool quantize --help` for the table)", name)
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
	for _, f := range FTypes {
		if f.Base == t {
			return f.ID
		}
	}
	return GuessedFType
}
