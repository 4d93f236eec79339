package infer

// DevPrompt is sd.cpp's template of Flux.2 dev for Mistral Small 3.x: BOS,
// Mistral's system prompt and instruction markers around the user's
// prompt, the hidden states of layers 10, 20 and 30 side by side (3 × 5120
// = dev's 15360), no token padding but the hidden states padded with zeros
// to 512 rows.
var DevPrompt = LLMPrompt{
	BOS:       "<s>",
	Before:    "[SYSTEM_PROMPT]You are an AI that reasons about image descriptions. You give structured responses focusing on object relationships, object\nattribution and actions without speculation.[/SYSTEM_PROMPT][INST]",
	After:     "[/INST]",
	Layers:    []int{10, 20, 30},
	MinHidden: 512,
}

func init() { conditioners["flux2_dev"] = flux2ConditionerFor(DevPrompt) }
