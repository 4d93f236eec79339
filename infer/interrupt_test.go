//go:build cgo

package infer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
)

// A cancelled request stops at the next graph node: the text encoder's
// graph is cut short (it records no importance statistics, where stopping
// between steps ran it to its end), the error says it stopped while
// encoding the prompt (not in a step), and the model generates again
// afterwards; one cancelled during sampling says after which step.
func TestGenerateCancelledStopsWithinAGraph(t *testing.T) {
	m := inferutil.LoadTiny(t, "../testdata/tiny-sd1.gguf")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("test interrupt"))
	s := infer.NewImatrixStats()
	m.SetImatrix(s)
	req := infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 1, Seed: 3, Method: infer.Euler, Context: ctx}
	_, err := m.Generate(req)
	m.SetImatrix(nil)
	if !errors.Is(err, infer.ErrInterrupted) || !strings.HasSuffix(err.Error(), "(test interrupt) while encoding the prompt") {
		t.Fatalf("cancelled: %v, want ErrInterrupted with the cause, while encoding the prompt", err)
	}
	if s.Len() != 0 {
		t.Errorf("the text encoder ran to its end (%d imatrix entries) although the request was cancelled", s.Len())
	}
	req.Context = context.Background()
	if _, err := m.Generate(req); err != nil {
		t.Errorf("after an interrupt the model does not generate: %v", err)
	}
	ctx, cancel = context.WithCancelCause(context.Background())
	req.Context, req.Steps = ctx, 2
	req.OnStep = func(step, _ int) {
		if step == 1 {
			cancel(errors.New("test interrupt"))
		}
	}
	if _, err := m.Generate(req); !errors.Is(err, infer.ErrInterrupted) || !strings.HasSuffix(err.Error(), "(test interrupt) after step 1 of 2") {
		t.Errorf("cancelled after the first step: %v, want ErrInterrupted after step 1 of 2", err)
	}
}
