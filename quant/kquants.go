package quant

import "github.com/sdtool/sdtool/formats"

// The k-quants (q2_K ... q6_K) and iq4_xs encode super-blocks of 256
// elements. Each codec has ggml's two algorithms: without importance weights
// the quantize_row_*_ref search, with them the quantize_*_impl search that
// weighs each element's error by its importance (ggml_quantize_chunk picks
// the same way). Every block is encoded from fixed-size arrays on the stack,
// so the codecs allocate nothing and share no mutable state.

func init() {
	for _, c := range []Codec{
		{Type: formats.Q2_K, Quantize: quantizeQ2K, Dequantize: dequantizeQ2K, UsesWeights: true},
		{Type: formats.Q3_K, Quantize: quantizeQ3K, Dequantize: dequantizeQ3K, UsesWeights: true},
		{Type: formats.Q4_K, Quantize: quantizeQ4K, Dequantize: dequantizeQ4K, UsesWeights: true},
		{Type: formats.Q5_K, Quantize: quantizeQ5K, Dequantize: dequantizeQ5K, UsesWeights: true},
		{Type: formats.Q6_K, Quantize: quantizeQ6K, Dequantize: dequantizeQ6K, UsesWeights: true},
		{Type: formats.IQ4_XS, Quantize: quantizeIQ4XS, Dequantize: dequantizeIQ4XS, UsesWeights: true},
	} {
		Register(c)
	}
}

// putF16 stores f as a little-endian IEEE half, rounded as ggml rounds it,
// and returns the value the half decodes to (ggml requantizes with it).
func putF16(dst []byte, f float32) float32 {
	putHalf(dst, f)
	return half(dst)
}

// blocks256 returns how many whole super-blocks src holds. A caller that
// breaks the Codec contract (src not whole blocks, dst or weights too short)
// gets a panic that says so rather than an index error deep inside a block;
// QuantizeRows turns such panics into errors.
func blocks256(t formats.DType, dst []byte, src, weights []float32) int {
	nb := len(src) / qkBlock
	if len(src)%qkBlock != 0 || len(dst) < nb*t.Info().BlockBytes || (weights != nil && len(weights) < len(src)) {
		panic("quant: " + t.String() + ": source, destination and weights do not describe whole blocks")
	}
	return nb
}
