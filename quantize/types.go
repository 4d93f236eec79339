package quantize

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// TypeDoc is one row of the documented table of --type values.
type TypeDoc struct {
	// Name is the value as users write it (names are case-insensitive,
	// except that a lower-case ggml name such as q4_K is the plain type).
	Name string
	// Output is the file format written: "gguf" or "safetensors".
	Output string
	// What describes the result in one line.
	What string
}

// TypeTable documents every --type value; `sdtool quantize --help` and the
// README print it.
var TypeTable = []TypeDoc{
	{"Q2_K", "gguf", "q2_K; V projections q3_K"},
	{"Q3_K_S", "gguf", "q3_K everywhere"},
	{"Q3_K_M, Q3_K", "gguf", "q3_K; first 2 V projections q5_K, later ones q4_K; fused qkv and FFN down q4_K"},
	{"Q3_K_L", "gguf", "q3_K; V projections q5_K, fused qkv q4_K, FFN down q5_K"},
	{"Q4_K_S", "gguf", "q4_K; first 4 V projections and FFN down q5_K"},
	{"Q4_K_M, Q4_K", "gguf", "q4_K; V projections and FFN down q6_K, fused qkv q5_K"},
	{"Q5_K_S", "gguf", "q5_K everywhere"},
	{"Q5_K_M, Q5_K", "gguf", "q5_K; V projections, fused qkv and FFN down q6_K"},
	{"Q6_K", "gguf", "q6_K everywhere"},
	{"Q8_0", "gguf", "q8_0 everywhere"},
	{"Q4_0, Q5_0", "gguf", "q4_0 / q5_0; FFN down q4_1 / q5_1"},
	{"Q4_1, Q5_1", "gguf", "q4_1 / q5_1 everywhere"},
	{"IQ4_NL, IQ4_XS", "gguf", "iq4_nl / iq4_xs everywhere (no upgrades)"},
	{"F16, BF16, F32", "gguf", "unquantized GGUF in that type"},
	{"q4_K, iq2_xxs, tq1_0, mxfp4, ...", "gguf", "any other ggml type name: that type for every eligible tensor, no mix"},
	{"int8_convrot", "safetensors", "ComfyUI INT8 with a Hadamard rotation per group (--convrot-group-size, default 256)"},
	{"int8", "safetensors", "ComfyUI INT8, one scale per row, no rotation"},
	{"fp8_e4m3, fp8_e5m2", "safetensors", "ComfyUI float8 with a tensor-wise weight_scale"},
	{"nvfp4", "safetensors", "ComfyUI NVFP4: E2M1, an FP8 scale per 16 values and a tensor scale (a .gguf output gets ggml's nvfp4)"},
	{"mxfp8", "safetensors", "ComfyUI MXFP8: float8_e4m3fn with an E8M0 scale per 32 values"},
	{"convrot_w4a4, w4a4, int4_convrot", "safetensors", "ComfyUI 4-bit ConvRot: rotated int4, a scale per row (run as W4A4)"},
	{"asym_w4a8_int8, w4a8, w4a8_int8", "safetensors", "ComfyUI W4A8: rotated 4-bit codebook indices, FP8 scales per 16, a scale per row (run as W8A8)"},
}

// WriteTypeTable prints TypeTable as an aligned text table.
func WriteTypeTable(w io.Writer, indent string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%sTYPE\tOUTPUT\tTENSORS GET\n", indent)
	for _, t := range TypeTable {
		fmt.Fprintf(tw, "%s%s\t%s\t%s\n", indent, t.Name, t.Output, t.What)
	}
	return tw.Flush()
}

// TypeTableText returns the table WriteTypeTable prints.
func TypeTableText(indent string) string {
	var b strings.Builder
	WriteTypeTable(&b, indent)
	return b.String()
}
