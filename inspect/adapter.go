package inspect

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/lora"
)

// AdapterSummary describes an adapter file (LoRA, LoCon, LoHa, LoKr, full
// differences): what package lora reads in it. Only tensor names, shapes
// and the small alpha and scale tensors are read.
type AdapterSummary struct {
	// Format is the naming convention most of the layers use ("kohya",
	// "peft", "diffusers", "lycoris", "xlabs", "comfyui", "sdcpp").
	Format string `json:"format"`
	// Styles counts the layers per naming convention.
	Styles map[string]int `json:"styles"`
	// Layers is the number of layers (one per adapted weight or bias).
	Layers int `json:"layers"`
	// Kinds counts the layers per algorithm ("lora", "loha", "lokr", "full").
	Kinds map[string]int `json:"kinds"`
	// Parts counts the layers per part of the model ("unet" for the
	// denoiser, "te", "te1", "te2", "te3" for text encoders).
	Parts map[string]int `json:"parts"`
	// Ranks and Alphas are the distinct ranks and stored alphas, sorted.
	Ranks  []int64   `json:"ranks"`
	Alphas []float64 `json:"alphas"`
	// DoRA counts weight-decomposed layers.
	DoRA int `json:"dora_layers"`
	// Family is the model family the names and shapes point to
	// ("unknown" when they do not tell).
	Family string `json:"family"`
	// Refused counts modules of kinds that cannot be baked (IA3, OFT, ...);
	// Unknown counts tensors that are not adapter tensors.
	Refused int `json:"refused_modules"`
	Unknown int `json:"unknown_tensors"`
	// Notes are remarks for the user (a PEFT scale that loaders ignore).
	Notes []string `json:"notes"`
	// Error says why the layers could not be read ("" when they could);
	// the other fields are then empty.
	Error string `json:"error,omitempty"`
}

// summarizeAdapter returns the adapter summary of m, or nil when m is not
// an adapter (most of its names lack an adapter suffix).
func summarizeAdapter(m formats.Model) *AdapterSummary {
	if !lora.IsAdapter(m.Tensors()) {
		return nil
	}
	s := &AdapterSummary{Styles: map[string]int{}, Kinds: map[string]int{}, Parts: map[string]int{},
		Ranks: []int64{}, Alphas: []float64{}, Notes: []string{}, Family: "unknown"}
	a, err := lora.Read(m)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	sum := lora.Summarize(a)
	s.Layers, s.DoRA, s.Refused, s.Unknown = sum.Layers, sum.DoRA, sum.Refused, sum.Unknown
	best := 0
	for k, v := range sum.Styles {
		s.Styles[k] = v
		if v > best || v == best && k < s.Format {
			s.Format, best = k, v
		}
	}
	for k, v := range sum.Kinds {
		s.Kinds[k.String()] = v
	}
	for k, v := range sum.Parts {
		s.Parts[k] = v
	}
	s.Ranks = append(s.Ranks, sum.Ranks...)
	s.Alphas = append(s.Alphas, sum.Alphas...)
	s.Family = sum.Family
	if s.Family == "" {
		s.Family = "unknown"
	}
	s.Notes = append(s.Notes, sum.Notes...)
	return s
}

// counts formats a count map as "a 3, b 1", largest first.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// writeAdapter prints the adapter section of the text summary.
func writeAdapter(w io.Writer, a *AdapterSummary) {
	if a.Error != "" {
		fmt.Fprintf(w, "  adapter: cannot read its layers: %s\n", a.Error)
		return
	}
	fmt.Fprintf(w, "  adapter:       %s, %s for %s\n", a.Format, plural(a.Layers, "layer"), a.Family)
	fmt.Fprintf(w, "    kinds:       %s\n", counts(a.Kinds))
	fmt.Fprintf(w, "    parts:       %s\n", counts(a.Parts))
	if len(a.Styles) > 1 {
		fmt.Fprintf(w, "    naming:      %s\n", counts(a.Styles))
	}
	if len(a.Ranks) > 0 {
		fmt.Fprintf(w, "    ranks:       %s\n", joinValues(a.Ranks))
	}
	if len(a.Alphas) > 0 {
		fmt.Fprintf(w, "    alphas:      %s\n", joinValues(a.Alphas))
	} else {
		fmt.Fprintf(w, "    alphas:      none stored (scale 1)\n")
	}
	if a.DoRA > 0 {
		fmt.Fprintf(w, "    dora:        %s\n", plural(a.DoRA, "layer"))
	}
	if a.Refused > 0 {
		fmt.Fprintf(w, "    refused:     %s of kinds that cannot be baked\n", plural(a.Refused, "module"))
	}
	if a.Unknown > 0 {
		fmt.Fprintf(w, "    unknown:     %s that are no adapter tensors\n", plural(a.Unknown, "tensor"))
	}
	for _, n := range a.Notes {
		fmt.Fprintf(w, "    note:        %s\n", n)
	}
}

func joinValues[T int64 | float64](v []T) string {
	const show = 8
	parts := make([]string, 0, min(len(v), show))
	for i, x := range v {
		if i == show {
			parts = append(parts, fmt.Sprintf("... (%d values)", len(v)))
			break
		}
		parts = append(parts, fmt.Sprint(x))
	}
	return strings.Join(parts, ", ")
}
