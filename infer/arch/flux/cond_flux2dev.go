package flux

import (
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/llm"
)

// DevPrompt is sd.cpp's template of Flux.2 dev for Mistral Small 3.x: BOS,
// Mistral's system prompt and instruction markers around the user's
// prompt, the hidden states of layers 10, 20 and 30 side by side (3 × 5120
// = dev's 15360), no token padding but the hidden states padded with zeros
// to 512 rows.
var DevPrompt = llm.LLMPrompt{
	BOS:       "<s>",
	Before:    "[SYSTEM_PROMPT]You are an AI that reasons about image descriptions. You give structured responses focusing on object relationships, object\nattribution and actions without speculation.[/SYSTEM_PROMPT][INST]",
	After:     "[/INST]",
	Layers:    []int{10, 20, 30},
	MinHidden: 512,
}

func init() { infer.RegisterConditioner("flux2_dev", flux2ConditionerFor(DevPrompt)) }
