package infer

import (
	"fmt"
)

// Want checks that tensor name exists with exactly the shape want.
func (s Shapes) Want(name string, want []int64) error {
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

// WantIf is s.want when cond holds.
func (s Shapes) WantIf(cond bool, name string, want []int64) error {
	if !cond {
		return nil
	}
	return s.Want(name, want)
}
