package formats

import (
	"errors"
	"fmt"
)

// Sharded is a Model made of several files opened separately (split GGUF,
// sharded safetensors). Tensor names must be unique across the parts.
type Sharded struct {
	path   string
	info   Info
	parts  []Model
	byFile map[string]Model
	list   []Tensor
	meta   Metadata
}

// NewSharded joins parts into one model opened from path. The first part's
// metadata is the model's, unless meta is non-nil. Duplicate tensor names
// across parts are an error.
func NewSharded(path string, info Info, parts []Model, meta Metadata) (*Sharded, error) {
	s := &Sharded{path: path, info: info, parts: parts, byFile: map[string]Model{}, meta: meta}
	seen := map[string]string{}
	for _, p := range parts {
		for _, t := range p.Tensors() {
			if prev, dup := seen[t.Name]; dup {
				return nil, fmt.Errorf("%s: tensor %q is in both %s and %s", path, t.Name, prev, t.File)
			}
			seen[t.Name] = t.File
			s.byFile[t.File] = p
			s.list = append(s.list, t)
		}
		s.info.Warnings = append(s.info.Warnings, p.Info().Warnings...)
	}
	if s.meta == nil && len(parts) > 0 {
		s.meta = parts[0].Metadata()
	}
	return s, nil
}

// Path returns the path the model was opened from.
func (s *Sharded) Path() string { return s.path }

// Info describes the shards.
func (s *Sharded) Info() Info { return s.info }

// Tensors lists the tensors of all shards in shard order.
func (s *Sharded) Tensors() []Tensor { return s.list }

// Metadata returns the model's metadata.
func (s *Sharded) Metadata() Metadata { return s.meta }

// Parts returns the models of the shards in order.
func (s *Sharded) Parts() []Model { return s.parts }

// ReadTensorAt reads from the shard that holds t.
func (s *Sharded) ReadTensorAt(t *Tensor, p []byte, off int64) (int, error) {
	m, ok := s.byFile[t.File]
	if !ok {
		return 0, fmt.Errorf("%s: tensor %q: file %s is not one of the shards", s.path, t.Name, t.File)
	}
	return m.ReadTensorAt(t, p, off)
}

// Close closes every shard.
func (s *Sharded) Close() error {
	var errs []error
	for _, p := range s.parts {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
