// Package option lets the engine packages name their options in errors in
// their own terms, as their Options fields are called (Type, MaxMemory,
// Budget.BPW), and lets a front end phrase those names its own way: the
// command line writes them as flags (--type, --max-memory, --bpw).
package option

import (
	"errors"
	"fmt"
	"strings"
)

// Name is an engine option as its Options field is called; nested
// options are joined with a dot (Budget.BPW).
type Name string

// Error is an error whose message names options.
type Error struct {
	format string
	args   []any
	err    error // the message with the options' own names
}

// Errorf formats like fmt.Errorf (%w included); each argument of type Name
// is an option, written as its name until a front end phrases it.
func Errorf(format string, args ...any) error {
	return &Error{format: format, args: args, err: fmt.Errorf(format, args...)}
}

// Error returns the message with every option written as its Name.
func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the errors the message wraps (%w).
func (e *Error) Unwrap() []error {
	switch u := e.err.(type) {
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	}
	return nil
}

// Names returns the options the message names, in order.
func (e *Error) Names() []Name {
	var out []Name
	for _, a := range e.args {
		if n, ok := a.(Name); ok {
			out = append(out, n)
		}
	}
	return out
}

// phrase returns the message with each option written as spell(name).
func (e *Error) phrase(spell func(Name) string) string {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if n, ok := a.(Name); ok {
			a = spell(n)
		}
		args[i] = a
	}
	return fmt.Errorf(e.format, args...).Error()
}

// Phrase returns err's message with the options of every Error in its
// tree written as spell(name); the text of the errors that wrap them stays
// as it is.
func Phrase(err error, spell func(Name) string) string {
	msg := err.Error()
	for _, e := range collect(err, nil) {
		// An outer Error's message holds its inner ones as they read
		// before phrasing, so outer first, then inner.
		msg = strings.Replace(msg, e.Error(), e.phrase(spell), 1)
	}
	return msg
}

// collect returns the Errors in err's tree, outermost first.
func collect(err error, out []*Error) []*Error {
	if err == nil {
		return out
	}
	var e *Error
	if errors.As(err, &e) && e == err {
		out = append(out, e)
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, inner := range u.Unwrap() {
			out = collect(inner, out)
		}
	case interface{ Unwrap() error }:
		out = collect(u.Unwrap(), out)
	}
	return out
}
