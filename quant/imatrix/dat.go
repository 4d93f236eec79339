package imatrix

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/sdtool/sdtool/formats"
)

// maxDatName bounds entry names in .dat files, so that a corrupt length
// fails cleanly instead of allocating.
const maxDatName = 1 << 16

// ReadDat reads a legacy llama.cpp imatrix (.dat). Stored values are
// mean(x²)×ncall; they become Sum2 with Counts = [ncall], so Mean() gives
// the mean that llama-quantize uses and Stored() gives the raw values that
// stable-diffusion.cpp uses. name labels errors. size bounds allocations (the
// file size; pass a negative value when unknown).
func ReadDat(r io.Reader, name string, size int64) (*Matrix, error) {
	br := bufio.NewReader(r)
	remaining := size
	read := func(p []byte) error {
		if remaining >= 0 && int64(len(p)) > remaining {
			return io.ErrUnexpectedEOF
		}
		if _, err := io.ReadFull(br, p); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if remaining >= 0 {
			remaining -= int64(len(p))
		}
		return nil
	}
	var b4 [4]byte
	readI32 := func() (int32, error) {
		if err := read(b4[:]); err != nil {
			return 0, err
		}
		return int32(binary.LittleEndian.Uint32(b4[:])), nil
	}
	n, err := readI32()
	if err != nil {
		return nil, fmt.Errorf("%s: reading the entry count: %w", name, err)
	}
	if n < 1 {
		return nil, fmt.Errorf("%s: %d entries (not an imatrix .dat file?)", name, n)
	}
	m := &Matrix{}
	for i := int32(0); i < n; i++ {
		l, err := readI32()
		if err != nil {
			return nil, fmt.Errorf("%s: entry %d: reading the name length: %w", name, i, err)
		}
		if l <= 0 || l > maxDatName {
			return nil, fmt.Errorf("%s: entry %d: name length %d out of range", name, i, l)
		}
		nb := make([]byte, l)
		if err := read(nb); err != nil {
			return nil, fmt.Errorf("%s: entry %d: reading the name: %w", name, i, err)
		}
		ename := string(nb)
		ncall, err := readI32()
		if err != nil {
			return nil, fmt.Errorf("%s: entry %q: reading ncall: %w", name, ename, err)
		}
		nval, err := readI32()
		if err != nil {
			return nil, fmt.Errorf("%s: entry %q: reading the value count: %w", name, ename, err)
		}
		if nval <= 0 || (remaining >= 0 && int64(nval)*4 > remaining) {
			return nil, fmt.Errorf("%s: entry %q: value count %d out of range", name, ename, nval)
		}
		if ncall < 0 {
			return nil, fmt.Errorf("%s: entry %q: negative ncall %d", name, ename, ncall)
		}
		raw := make([]byte, 4*int(nval))
		if err := read(raw); err != nil {
			return nil, fmt.Errorf("%s: entry %q: reading %d values: %w", name, ename, nval, err)
		}
		e := &Entry{Name: ename, NCall: int(ncall), Sum2: make([]float32, nval), Counts: []float32{float32(ncall)}}
		for j := range e.Sum2 {
			e.Sum2[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
		if err := m.add(e, name); err != nil {
			return nil, err
		}
	}
	// Optional trailer: last_chunk, then dataset name length and bytes.
	if last, err := readI32(); err == nil {
		m.ChunkCount = int(last)
		if l, err := readI32(); err == nil && l > 0 && l <= maxDatName {
			nb := make([]byte, l)
			if read(nb) == nil {
				m.Datasets = []string{string(nb)}
			}
		}
	}
	return m, nil
}

// Stored returns the values as a legacy .dat file stores them (mean×ncall):
// the vector stable-diffusion.cpp passes to the quantizer. When every count
// equals ncall (an entry read from a .dat file) that is Sum2 itself, exactly.
func (e *Entry) Stored() []float32 {
	legacy := len(e.Counts) > 0
	for _, c := range e.Counts {
		legacy = legacy && c == float32(e.NCall)
	}
	if legacy {
		return append([]float32(nil), e.Sum2...)
	}
	mean := e.Mean()
	for i := range mean {
		mean[i] *= float32(e.NCall)
	}
	return mean
}

// WriteDat writes m in the legacy .dat layout, entries in m's order, with
// values mean×ncall and the last_chunk/dataset trailer.
func WriteDat(w io.Writer, m *Matrix) error {
	if len(m.Entries) == 0 {
		return errors.New("imatrix: no entries to write")
	}
	bw := bufio.NewWriter(w)
	putI32 := func(v int32) {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(v))
		bw.Write(b[:])
	}
	putI32(int32(len(m.Entries)))
	for _, e := range m.Entries {
		putI32(int32(len(e.Name)))
		bw.WriteString(e.Name)
		putI32(int32(e.NCall))
		putI32(int32(len(e.Sum2)))
		var b [4]byte
		for _, v := range e.Stored() {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			bw.Write(b[:])
		}
	}
	putI32(int32(m.ChunkCount))
	if len(m.Datasets) > 0 && m.Datasets[0] != "" {
		putI32(int32(len(m.Datasets[0])))
		bw.WriteString(m.Datasets[0])
	}
	return bw.Flush()
}

// OpenDat reads a legacy .dat imatrix file.
func OpenDat(path string) (*Matrix, error) {
	f, _, err := formats.OpenRegular(path, math.MaxInt64) // the reader bounds what it allocates
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return ReadDat(f, path, st.Size())
}

// SumStored merges matrices the way stable-diffusion.cpp loads several
// --imat-in files: stored values summed element-wise (in float32, as sd.cpp
// accumulates), ncall summed. A name with different lengths is an error.
func SumStored(files []string, ms []*Matrix) (map[string][]float32, error) {
	out := map[string][]float32{}
	for k, m := range ms {
		for _, e := range m.Entries {
			v := e.Stored()
			acc, ok := out[e.Name]
			if !ok {
				out[e.Name] = v
				continue
			}
			if len(acc) != len(v) {
				return nil, fmt.Errorf("%s: entry %q has %d values, earlier files had %d", files[k], e.Name, len(v), len(acc))
			}
			for i := range acc {
				acc[i] += v[i]
			}
		}
	}
	return out, nil
}
