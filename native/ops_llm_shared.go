package native

// Rotary embedding pairings (ggml's rope modes).
const (
	// RopeNormal rotates adjacent pairs (x[2i], x[2i+1]) (Llama, Mistral).
	RopeNormal = 0
	// RopeNeox rotates x[i] with x[i+d/2] (GPT-NeoX, Qwen).
	RopeNeox = 2
	// RopeMRoPE is Qwen2-VL's multimodal rotation (RopeMulti).
	RopeMRoPE = 8
)
