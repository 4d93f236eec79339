package tensor

// Scratch holds one worker's reusable buffers. A caller numbers its own
// buffers (Bytes(0, n), Float32s(1, n), ...); Source.Read keeps its buffers
// apart from those, so a caller never has to know which numbers the reader
// uses. A buffer keeps its capacity between calls, so a steady stream of
// equal chunks allocates nothing. A Scratch is not safe for concurrent use:
// each worker has its own.
type Scratch struct {
	bytes  [][]byte
	floats [][]float32
	raw    []byte    // Source.Read: the stored bytes of the covering units
	wide   []float32 // Source.Read: the decoded units of an unaligned range
}

// Bytes returns buffer i of n bytes (its contents are whatever its last
// user left there).
func (s *Scratch) Bytes(i, n int) []byte {
	for len(s.bytes) <= i {
		s.bytes = append(s.bytes, nil)
	}
	s.bytes[i] = grow(s.bytes[i], n)
	return s.bytes[i]
}

// Float32s returns float buffer i of n values.
func (s *Scratch) Float32s(i, n int) []float32 {
	for len(s.floats) <= i {
		s.floats = append(s.floats, nil)
	}
	s.floats[i] = grow(s.floats[i], n)
	return s.floats[i]
}

// Trim drops the buffers larger than limit bytes, so that memory falls
// back to a budget after an oversized chunk.
func (s *Scratch) Trim(limit int64) {
	for i, b := range s.bytes {
		if int64(cap(b)) > limit {
			s.bytes[i] = nil
		}
	}
	for i, f := range s.floats {
		if 4*int64(cap(f)) > limit {
			s.floats[i] = nil
		}
	}
	if int64(cap(s.raw)) > limit {
		s.raw = nil
	}
	if 4*int64(cap(s.wide)) > limit {
		s.wide = nil
	}
}

// grow returns b resliced to n elements, reallocated when it is too small.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
