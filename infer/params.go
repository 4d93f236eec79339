package infer

import (
	"strconv"
	"strings"
)

// GenerationParams are the settings of one generated image, written to a PNG's parameters chunk.
type GenerationParams struct {
	// Prompt and NegativePrompt are the texts as the user gave them (weights syntax included).
	Prompt, NegativePrompt string
	// Steps is the number of sampling steps.
	Steps int
	// Sampler and Scheduler name the sampling method and the sigma schedule.
	Sampler   Method
	Scheduler Scheduler
	// CFGScale is the classifier-free guidance scale.
	CFGScale float32
	// Seed is the noise seed.
	Seed int64
	// Width and Height are the image size in pixels.
	Width, Height int
	// Model names the model (usually its file name without the folder).
	Model string
	// RNG is the noise generator ("cuda" or "cpu"); empty is omitted.
	RNG string
	// Strength is img2img's denoising strength; 0 (txt2img) is omitted.
	Strength float32
	// Version names the program ("sdtool v0.1.0"); empty is omitted.
	Version string
}

// a1111Quote quotes a value the way A1111 does when it contains a separator (JSON string syntax).
func a1111Quote(s string) string {
	if !strings.ContainsAny(s, ",\n:") {
		return s
	}
	return strconv.Quote(s)
}

func formatFloat(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) }

// String formats the settings as A1111's "parameters" text: the prompt, a "Negative prompt:" line when
// there is one, then one line of "Key: value" pairs separated by ", ".
func (p GenerationParams) String() string {
	var b strings.Builder
	b.WriteString(p.Prompt)
	if p.NegativePrompt != "" {
		b.WriteString("\nNegative prompt: ")
		b.WriteString(p.NegativePrompt)
	}
	b.WriteString("\n")
	fields := []string{"Steps: " + strconv.Itoa(p.Steps)}
	if p.Sampler != "" {
		fields = append(fields, "Sampler: "+p.Sampler.A1111Name())
	}
	switch p.Scheduler {
	case SchedulerKarras:
		fields = append(fields, "Schedule type: Karras")
	case SchedulerDiscrete:
		fields = append(fields, "Schedule type: Discrete")
	case "":
	default:
		fields = append(fields, "Schedule type: "+a1111Quote(string(p.Scheduler)))
	}
	fields = append(fields,
		"CFG scale: "+formatFloat(p.CFGScale),
		"Seed: "+strconv.FormatInt(p.Seed, 10),
		"Size: "+strconv.Itoa(p.Width)+"x"+strconv.Itoa(p.Height))
	if p.Model != "" {
		fields = append(fields, "Model: "+a1111Quote(p.Model))
	}
	if p.Strength != 0 {
		fields = append(fields, "Denoising strength: "+formatFloat(p.Strength))
	}
	if p.RNG != "" {
		fields = append(fields, "RNG: "+a1111Quote(p.RNG))
	}
	if p.Version != "" {
		fields = append(fields, "Version: "+a1111Quote(p.Version))
	}
	b.WriteString(strings.Join(fields, ", "))
	return b.String()
}
