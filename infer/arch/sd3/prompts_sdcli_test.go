//go:build cgo

package sd3

import (
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/synth"
)

// TestFamilyPromptsMatchSDCLI runs inferutil.PromptParity's three cases (a
// weighted prompt, a weighted negative prompt, img2img) against sd-cli for
// SD3, through the family's own parity harness.
func TestFamilyPromptsMatchSDCLI(t *testing.T) {
	t.Run("sd3", func(t *testing.T) {
		bin := inferutil.ChromaSDCLI(t)
		merges := sd3Merges(t)
		r := sd3Run(t, synth.SD3ParityMedium, "sd35-medium-parity")
		r.Size = 64
		inferutil.PromptParity{Bin: bin, Args: r.sdcliArgs, Comps: r.components(), Opt: infer.LoadOptions{Threads: r.Threads, Tokenizers: map[string]string{"clip": merges}},
			Req: r.request(), Weighted: inferutil.WeightedWords, Negative: inferutil.NegativeWords, CFG: 6}.Run(t, r.Size)
	})
}
