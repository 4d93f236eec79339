//go:build cgo

package qwenimage

import (
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
)

// TestFamilyPromptsMatchSDCLI runs inferutil.PromptParity's three cases (a
// weighted prompt, a weighted negative prompt, img2img) against sd-cli for
// Qwen-Image, through the family's own parity harness.
func TestFamilyPromptsMatchSDCLI(t *testing.T) {
	t.Run("qwen_image", func(t *testing.T) {
		bin, tok := qwenImageParityEnv(t)
		parts, _ := qwenImageParityFiles(t)
		r := qwenImageParityRun{Parts: parts, Prompt: "a red fox", Size: 64, Steps: 2, Seed: 42, CFG: 2.5, Threads: 2, Tokenizer: tok}
		inferutil.PromptParity{Bin: bin, Args: r.sdcliArgs, Comps: r.components(), Opt: infer.LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"llm": tok}},
			Req: r.request(), Weighted: inferutil.WeightedWords, Negative: inferutil.NegativeWords, CFG: 4}.Run(t, r.Size)
	})
}
