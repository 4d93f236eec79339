package imatrix

import (
	"fmt"
	"math"
	"sort"
)

// Entry holds the statistics of one weight tensor.
type Entry struct {
	// Name is the weight tensor's name.
	Name string
	// Sum2 is the sum of squared activations per input column (n_per_row ×
	// n_mat values). For a legacy .dat entry it is the stored mean×ncall.
	Sum2 []float32
	// Counts is the number of activation rows seen per matrix (n_mat values:
	// one for a dense weight, one per expert for MUL_MAT_ID weights). For a
	// legacy .dat entry it is ncall, so that Sum2/Counts is still the mean.
	Counts []float32
	// NCall is the number of matrix multiplications seen (the legacy format's ncall).
	NCall int
	// AbsMax is the largest activation magnitude seen per input column
	// (as Sum2), what an activation scale is calibrated from; nil when the
	// file does not record it (the legacy format and llama.cpp's never do).
	AbsMax []float32
}

// Max returns the largest value of AbsMax: the activation maximum of the
// whole layer, and whether the entry records one.
func (e *Entry) Max() (float32, bool) {
	if len(e.AbsMax) == 0 {
		return 0, false
	}
	var m float32
	for _, v := range e.AbsMax {
		m = max(m, v)
	}
	return m, true
}

// Mean returns the mean squared activation per column: what llama-quantize
// passes to the quantizer.
func (e *Entry) Mean() []float32 {
	out := make([]float32, len(e.Sum2))
	per := len(e.Sum2) / max(len(e.Counts), 1)
	for i, s := range e.Sum2 {
		c := float32(1)
		if len(e.Counts) > 0 && per > 0 {
			c = e.Counts[min(i/per, len(e.Counts)-1)]
		}
		if c <= 0 {
			c = 1
		}
		out[i] = s / c
	}
	return out
}

// Matrix is an importance matrix: entries by weight name, with provenance.
type Matrix struct {
	// Entries in file order.
	Entries []*Entry
	// Datasets names the calibration data (GGUF imatrix.datasets; the legacy trailer).
	Datasets []string
	// ChunkCount is the number of chunks (GGUF imatrix.chunk_count; the legacy last_chunk).
	ChunkCount int
	// ChunkSize is the tokens per chunk (GGUF imatrix.chunk_size); 0 when unknown.
	ChunkSize int

	byName map[string]*Entry
}

// Lookup returns the entry of a weight tensor.
func (m *Matrix) Lookup(name string) (*Entry, bool) {
	if m.byName == nil {
		m.index()
	}
	e, ok := m.byName[name]
	return e, ok
}

func (m *Matrix) index() {
	m.byName = make(map[string]*Entry, len(m.Entries))
	for _, e := range m.Entries {
		m.byName[e.Name] = e
	}
}

// add appends an entry, refusing duplicates.
func (m *Matrix) add(e *Entry, file string) error {
	if m.byName == nil {
		m.index()
	}
	if _, dup := m.byName[e.Name]; dup {
		return fmt.Errorf("%s: entry %q appears twice", file, e.Name)
	}
	m.byName[e.Name] = e
	m.Entries = append(m.Entries, e)
	return nil
}

// Names returns the entry names, sorted.
func (m *Matrix) Names() []string {
	out := make([]string, len(m.Entries))
	for i, e := range m.Entries {
		out[i] = e.Name
	}
	sort.Strings(out)
	return out
}

// Validate checks that every value is finite and non-negative.
func (m *Matrix) Validate(file string) error {
	for _, e := range m.Entries {
		for i, v := range e.Sum2 {
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
				return fmt.Errorf("%s: entry %q: value %d is %v (must be finite and non-negative)", file, e.Name, i, v)
			}
		}
	}
	return nil
}
