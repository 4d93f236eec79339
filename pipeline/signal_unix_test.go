//go:build unix

package pipeline

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestSignalContext(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		ctx, stop := SignalContext()
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%v did not cancel the context", sig)
		}
		var se *SignalError
		if !errors.As(context.Cause(ctx), &se) || se.Signal != sig {
			t.Errorf("cause %v, want %v", context.Cause(ctx), sig)
		}
		stop()
	}
	ctx, stop := SignalContext()
	stop()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Errorf("stop: cause %v", context.Cause(ctx))
	}
}
