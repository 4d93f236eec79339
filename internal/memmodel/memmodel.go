// Package memmodel is a formats.Model held in memory, for the tests of the
// packages that read models: tensors are added with their raw bytes, and
// reads of a tensor can be made to fail.
package memmodel

import (
	"fmt"
	"io"

	"github.com/sdtool/sdtool/formats"
)

// Model is an in-memory formats.Model.
type Model struct {
	// Name is the model's path; Format what Info says it is.
	Name, Format string
	// List holds the tensors in file order, Data their bytes by name.
	List []formats.Tensor
	Data map[string][]byte
	// Meta is the model's metadata.
	Meta formats.Metadata
	// ReadErr, when it has an error for a tensor, fails its reads.
	ReadErr map[string]error
}

// New returns an empty model named path, of format format.
func New(path, format string) *Model {
	return &Model{Name: path, Format: format, Data: map[string][]byte{}, ReadErr: map[string]error{}}
}

// Add appends a tensor with the given raw bytes (their length must match
// the type and shape) and returns its descriptor.
func (m *Model) Add(name string, typ formats.DType, shape []int64, data []byte) formats.Tensor {
	t := formats.Tensor{Name: name, Type: typ, Shape: shape, File: m.Name, Size: int64(len(data))}
	m.List = append(m.List, t)
	m.Data[name] = data
	return t
}

// Path returns the model's name.
func (m *Model) Path() string { return m.Name }

// Info says the model's format and its one file.
func (m *Model) Info() formats.Info { return formats.Info{Format: m.Format, Files: []string{m.Name}} }

// Tensors returns the tensors in file order.
func (m *Model) Tensors() []formats.Tensor { return m.List }

// Metadata returns Meta.
func (m *Model) Metadata() formats.Metadata { return m.Meta }

// Close does nothing.
func (m *Model) Close() error { return nil }

// ReadTensorAt copies the tensor's bytes from off, failing as ReadErr says.
func (m *Model) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	if err := m.ReadErr[t.Name]; err != nil {
		return 0, err
	}
	d, ok := m.Data[t.Name]
	if !ok {
		return 0, fmt.Errorf("no tensor %q", t.Name)
	}
	if off >= int64(len(d)) {
		return 0, io.EOF
	}
	n := copy(p, d[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
