// Package llm is the decoder-only text encoder kind ("llm": Qwen3,
// Qwen2.5-VL's text model and Mistral Small 3.x): its configuration from
// shapes, its graph, its tokenizer loader and EncodeLLMPrompt, which
// conditioners call with their chat template; registered with package
// infer from init.
package llm
