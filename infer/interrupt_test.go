//go:build cgo

package infer

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A cancelled request stops at the next graph node: the text encoder's
// graph is cut short (it records no importance statistics, where stopping
// between steps ran it to its end), the error says where, and the model
// generates again afterwards.
func TestGenerateCancelledStopsWithinAGraph(t *testing.T) {
	m := loadTiny(t, "../testdata/tiny-sd1.gguf")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("test interrupt"))
	s := NewImatrixStats()
	m.SetImatrix(s)
	req := Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 1, Seed: 3, Method: Euler, Context: ctx}
	_, err := m.Generate(req)
	m.SetImatrix(nil)
	if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "test interrupt") || !strings.Contains(err.Error(), "after step 0 of 1") {
		t.Fatalf("cancelled: %v, want ErrInterrupted with the cause after step 0 of 1", err)
	}
	if s.Len() != 0 {
		t.Errorf("the text encoder ran to its end (%d imatrix entries) although the request was cancelled", s.Len())
	}
	req.Context = context.Background()
	if _, err := m.Generate(req); err != nil {
		t.Errorf("after an interrupt the model does not generate: %v", err)
	}
}
