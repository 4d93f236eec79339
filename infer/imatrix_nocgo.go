//go:build !cgo

package infer

// SetImatrix does nothing: without cgo no model can be loaded.
func (m *Model) SetImatrix(s *ImatrixStats) {}
