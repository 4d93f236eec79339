package infer

import (
	"fmt"
)

// want checks that tensor name exists with exactly the shape want.
func (s shapes) want(name string, want []int64) error {
	sh, ok := s[name]
	if !ok {
		return fmt.Errorf("model has no tensor %q", name)
	}
	if len(sh) != len(want) {
		return fmt.Errorf("tensor %q has shape %v, want %v", name, sh, want)
	}
	for i := range sh {
		if sh[i] != want[i] {
			return fmt.Errorf("tensor %q has shape %v, want %v", name, sh, want)
		}
	}
	return nil
}

// wantIf is s.want when cond holds.
func (s shapes) wantIf(cond bool, name string, want []int64) error {
	if !cond {
		return nil
	}
	return s.want(name, want)
}
