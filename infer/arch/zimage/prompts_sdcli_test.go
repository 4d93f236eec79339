//go:build cgo

package zimage

import (
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
)

// TestFamilyPromptsMatchSDCLI runs inferutil.PromptParity's three cases (a
// weighted prompt, a weighted negative prompt, img2img) against sd-cli for
// Z-Image, through the family's own parity harness.
func TestFamilyPromptsMatchSDCLI(t *testing.T) {
	t.Run("zimage", func(t *testing.T) {
		c, name, size := zimageParityModelFor()
		bin, c := zimageSDCLI(t, c)
		r := zimageParityRun{Parts: zimageParityModel(t, c, name, false), Prompt: zimagePrompts[0], Size: size, Steps: 2, Seed: 42, Threads: 2}
		inferutil.PromptParity{Bin: bin, Args: r.sdcliArgs, Comps: r.components(), Opt: infer.LoadOptions{Threads: r.Threads}, Req: r.request(t),
			Weighted: inferutil.WeightedWords, Negative: inferutil.NegativeWords, CFG: 3}.Run(t, size)
	})
}
