package infer

// PLACEHOLDER (branch flux) until branch t5enc's T5 encoder lands: this file
// stands in for its T5Config and detection, and runT5 returns zero hidden
// states. Delete it at that merge; cond_flux.go then calls the real graph.

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
)

// T5Config is a T5 encoder's configuration (placeholder: its width only).
type T5Config struct {
	// Component is the sd-cli flag of its standalone file ("t5xxl").
	Component string
	// Prefix is where its weights live among the internal names.
	Prefix string
	// Hidden is d_model.
	Hidden int
}

func init() {
	encoderKinds["t5"] = func(s shapes, md formats.Metadata, e *TextEncoder, cfg *ModelConfig) error {
		h, err := s.dim(e.Prefix+"shared.weight", 1)
		if err != nil {
			return fmt.Errorf("T5: %w", err)
		}
		cfg.T5 = &T5Config{Component: e.Component, Prefix: e.Prefix, Hidden: h}
		return nil
	}
}

// runT5 returns the T5 encoder's hidden states [len(ids)][Hidden] (placeholder: zeros).
func (m *Model) runT5(cfg *T5Config, ids []int32) ([]float32, error) {
	return make([]float32, len(ids)*cfg.Hidden), nil
}
