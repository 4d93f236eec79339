package infer

import "testing"

func TestGenerationParamsString(t *testing.T) {
	p := GenerationParams{
		Prompt: "a (cat:1.2)", NegativePrompt: "blurry", Steps: 20, Sampler: EulerAncestral,
		Scheduler: SchedulerKarras, CFGScale: 7, Seed: 42, Width: 512, Height: 768,
		Model: "v1-5-pruned-emaonly.q4_K", RNG: RNGCUDA, Version: "sdtool",
	}
	want := "a (cat:1.2)\nNegative prompt: blurry\nSteps: 20, Sampler: Euler a, Schedule type: Karras, CFG scale: 7, " +
		"Seed: 42, Size: 512x768, Model: v1-5-pruned-emaonly.q4_K, RNG: cuda, Version: sdtool"
	if got := p.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	q := GenerationParams{Prompt: "x", Steps: 4, Sampler: DPMPP2M, CFGScale: 7.5, Seed: -1, Width: 64, Height: 64,
		Model: "a, b", Strength: 0.75}
	want = "x\nSteps: 4, Sampler: DPM++ 2M, CFG scale: 7.5, Seed: -1, Size: 64x64, Model: \"a, b\", Denoising strength: 0.75"
	if got := q.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
