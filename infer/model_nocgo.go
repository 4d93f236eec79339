//go:build !cgo

package infer

import (
	"time"

	"github.com/sdtool/sdtool/formats"
)

// Available reports whether this build can run inference (it needs cgo and ggml).
const Available = false

// Model is a loaded model; without cgo none can be loaded.
type Model struct {
	// Path is the model file.
	Path string
	// Config is the detected configuration.
	Config *ModelConfig
	// LoadTime is how long loading took.
	LoadTime time.Duration
}

// Load reports ErrNoCgo: inference needs ggml.
func Load(path string, opt LoadOptions) (*Model, error) { return nil, ErrNoCgo }

// Close does nothing.
func (m *Model) Close() {}

// Generate reports ErrNoCgo.
func (m *Model) Generate(req Request) (*Result, error) { return nil, ErrNoCgo }

// ParamsByType returns nothing.
func (m *Model) ParamsByType() map[string]map[formats.DType]int64 { return nil }

// LinkedAVX2 reports false: no ggml is linked.
func LinkedAVX2() bool { return false }
