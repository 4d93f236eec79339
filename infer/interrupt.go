package infer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/native"
)

// Generate runs text-to-image (or image-to-image with req.Init) sampling
// and decodes the result. Unset sampler and scheduler take the family's
// defaults. A cancelled req.Context stops it within one graph node (ggml
// asks before every node), not only between steps: at 512x512 on a busy
// machine one step took half a minute.
func (m *Model) Generate(req Request) (*Result, error) {
	if req.Context == nil {
		return m.generate(req)
	}
	step, steps := 0, req.Steps
	onStep := req.OnStep
	req.OnStep = func(s, n int) {
		step, steps = s, n
		if onStep != nil {
			onStep(s, n)
		}
	}
	m.Backend.ResetAbort()
	if req.Context.Err() != nil {
		m.Backend.Abort() // already cancelled: stop at the first node, not when a goroutine gets to it
	}
	aborted := make(chan struct{})
	stop := context.AfterFunc(req.Context, func() {
		m.Backend.Abort()
		close(aborted)
	})
	defer func() {
		if !stop() {
			<-aborted // Abort has run: clear it only after it has
		}
		m.Backend.ResetAbort()
	}()
	res, err := m.generate(req)
	if errors.Is(err, native.ErrAborted) {
		where := fmt.Sprintf("after step %d of %d", step, steps)
		if strings.HasSuffix(err.Error(), whileEncoding) {
			where = whileEncoding
		}
		return nil, fmt.Errorf("%w (%v) %s", ErrInterrupted, context.Cause(req.Context), where)
	}
	return res, err
}

// whileEncoding ends the error of an abort in the text encoders, so that
// an interrupt there is not reported as one in the first step.
const whileEncoding = "while encoding the prompt"
