// Package text turns prompts into token ids for the text encoders of
// diffusion models: CLIP's byte-level BPE tokenizer with its loaders
// (tokenizer.json, vocab.json and merges.txt, bare merges, or merges embedded
// in a model's metadata under CLIPMergesKey), and the A1111 / stable-diffusion.cpp
// prompt-weight syntax (ParseAttention, CLIPTokenizer.EncodeWeighted).
//
// It knows nothing of ggml or of any model family's graph: package infer
// (the engine) imports it, and it imports only formats (for metadata).
package text
