package console

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// SignalError is the cancellation cause of a SignalContext that received a signal.
type SignalError struct {
	// Signal is the signal received.
	Signal os.Signal
}

// Error names the signal ("received SIGINT").
func (e *SignalError) Error() string {
	switch e.Signal {
	case os.Interrupt:
		return "received SIGINT"
	case syscall.SIGTERM:
		return "received SIGTERM"
	}
	return "received signal " + e.Signal.String()
}

// SignalContext returns a context that is cancelled, with a *SignalError as
// its cause, on SIGINT or SIGTERM, and a stop function that releases the
// signals. After the first signal the default handling is restored, so a
// second Ctrl-C ends a process that is slow to clean up.
func SignalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(&SignalError{Signal: s})
		case <-done:
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel(context.Canceled)
		})
	}
	return ctx, stop
}
