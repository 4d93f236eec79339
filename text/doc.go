// Package text turns prompts into token ids for the text encoders of
// diffusion models: CLIP's byte-level BPE tokenizer with its loaders
// (tokenizer.json, vocab.json and merges.txt, bare merges, or merges embedded
// in a model's metadata under CLIPMergesKey, which MetadataKV writes), the
// search for one where people keep it (FindCLIPTokenizer: beside the model, a
// diffusers folder, a ComfyUI install, the Hugging Face cache), and the A1111 / stable-diffusion.cpp
// prompt-weight syntax (ParseAttention, CLIPTokenizer.EncodeWeighted), and
// SentencePiece's unigram tokenizer for T5/UMT5 (UnigramTokenizer, read from a
// spiece.model, a unigram tokenizer.json, a folder holding either, or GGUF
// metadata under llama.cpp's tokenizer.ggml keys), with sd.cpp's chunked and
// Hugging Face's truncated fixed-length layouts, and the byte-level BPE
// tokenizer of decoder-only LLM text encoders (ByteBPETokenizer: Qwen2,
// Qwen2.5 and Qwen3, with Qwen's pre-tokenizer split and added tokens; read
// from a tokenizer.json, vocab.json with merges.txt, a folder holding either,
// or GGUF metadata under tokenizer.ggml.*).
//
// It knows nothing of ggml or of any model family's graph: package infer
// (the engine) imports it, and it imports only formats (for metadata).
package text
