package imatrix

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// GGUF imatrix keys and tensor suffixes (llama.cpp's format).
const (
	keyType       = "general.type"
	keyDatasets   = "imatrix.datasets"
	keyChunkCount = "imatrix.chunk_count"
	keyChunkSize  = "imatrix.chunk_size"
	suffixSum2    = ".in_sum2"
	suffixCounts  = ".counts"
	// suffixAbsMax is sdtool's addition: per-column activation maxima, a
	// tensor llama.cpp's readers skip (they take .in_sum2, .counts and
	// .in_sum only).
	suffixAbsMax = ".in_absmax"
)

// MaxGGMLName is the name length stock ggml (and llama.cpp) refuses: GGUF
// imatrix tensor names must be shorter.
const MaxGGMLName = 64

// ReadGGUF reads llama.cpp's GGUF imatrix from an opened GGUF model:
// `<weight>.in_sum2` (F32, ne=[n_per_row, n_mat]) and `<weight>.counts` (F32,
// ne=[1, n_mat]) tensor pairs. NCall is the chunk count that the counts
// represent (ceil(max count / chunk_size)), as llama.cpp uses when it writes
// the legacy format.
func ReadGGUF(m formats.Model) (*Matrix, error) {
	path := m.Path()
	meta := m.Metadata()
	if s, _ := meta.String(keyType); s != "imatrix" {
		return nil, fmt.Errorf("%s: not a GGUF imatrix (general.type is %q)", path, s)
	}
	mx := &Matrix{}
	if kv, ok := meta.Get(keyDatasets); ok {
		if a, ok := kv.Value.(formats.Array); ok {
			if ss, ok := a.Values.([]string); ok {
				mx.Datasets = ss
			}
		}
	}
	mx.ChunkCount = metaInt(meta, keyChunkCount)
	mx.ChunkSize = metaInt(meta, keyChunkSize)
	if mx.ChunkCount < 0 || mx.ChunkSize < 0 {
		return nil, fmt.Errorf("%s: %s and %s must be counts from 0 to %d", path, keyChunkCount, keyChunkSize, maxCalls)
	}
	tensors := map[string]formats.Tensor{}
	var order []string
	for _, t := range m.Tensors() {
		tensors[t.Name] = t
		if strings.HasSuffix(t.Name, suffixSum2) {
			order = append(order, strings.TrimSuffix(t.Name, suffixSum2))
		}
	}
	for _, name := range order {
		st := tensors[name+suffixSum2]
		ct, ok := tensors[name+suffixCounts]
		if !ok {
			return nil, fmt.Errorf("%s: entry %q has %s but no %s", path, name, suffixSum2, suffixCounts)
		}
		if st.Type != formats.F32 || ct.Type != formats.F32 {
			return nil, fmt.Errorf("%s: entry %q: in_sum2 and counts must be f32, not %s and %s", path, name, st.Type, ct.Type)
		}
		nMat := int64(1)
		if len(st.Shape) == 2 {
			nMat = st.Shape[0]
		}
		if ct.Elements() != nMat {
			return nil, fmt.Errorf("%s: entry %q: %d counts for %d matrices", path, name, ct.Elements(), nMat)
		}
		e := &Entry{Name: name}
		var err error
		if e.Sum2, err = readF32(m, &st); err != nil {
			return nil, err
		}
		if e.Counts, err = readF32(m, &ct); err != nil {
			return nil, err
		}
		if e.AbsMax, err = readAbsMax(m, tensors, name, len(e.Sum2)); err != nil {
			return nil, err
		}
		var maxCount float32
		for i, c := range e.Counts {
			// A count is a number of calls: NaN, Inf, negative or huge
			// values once became calls -9223372036854775808.
			if !(c >= 0 && c <= maxCalls) {
				return nil, fmt.Errorf("%s: entry %q: count %d is %v (want a number of calls from 0 to %d)", path, name, i, c, maxCalls)
			}
			maxCount = max(maxCount, c)
		}
		e.NCall = int(maxCount)
		if mx.ChunkSize > 0 {
			e.NCall = int(math.Ceil(float64(maxCount) / float64(mx.ChunkSize)))
		}
		if err := mx.add(e, path); err != nil {
			return nil, err
		}
	}
	if len(mx.Entries) == 0 {
		return nil, fmt.Errorf("%s: GGUF imatrix has no entries", path)
	}
	return mx, nil
}

// readAbsMax reads entry name's optional in_absmax tensor: n finite,
// non-negative F32 values, or nil when the file has none.
func readAbsMax(m formats.Model, tensors map[string]formats.Tensor, name string, n int) ([]float32, error) {
	t, ok := tensors[name+suffixAbsMax]
	if !ok {
		return nil, nil
	}
	if t.Type != formats.F32 || t.Elements() != int64(n) {
		return nil, fmt.Errorf("%s: entry %q: in_absmax must be %d f32 values, not %d %s", m.Path(), name, n, t.Elements(), t.Type)
	}
	v, err := readF32(m, &t)
	if err != nil {
		return nil, err
	}
	for i, x := range v {
		if !(x >= 0 && x <= math.MaxFloat32) {
			return nil, fmt.Errorf("%s: entry %q: in_absmax %d is %v (want a finite magnitude)", m.Path(), name, i, x)
		}
	}
	return v, nil
}

// maxCalls bounds counts and chunk sizes (an int32's range, what llama.cpp
// stores them in).
const maxCalls = math.MaxInt32

// metaInt returns an integer key's value, -1 when it is out of [0, maxCalls].
func metaInt(meta formats.Metadata, key string) int {
	kv, ok := meta.Get(key)
	if !ok {
		return 0
	}
	var v int64
	switch x := kv.Value.(type) {
	case uint32:
		v = int64(x)
	case int32:
		v = int64(x)
	case uint64:
		v = int64(min(x, math.MaxInt64))
	case int64:
		v = x
	}
	if v < 0 || v > maxCalls {
		return -1
	}
	return int(v)
}

func readF32(m formats.Model, t *formats.Tensor) ([]float32, error) {
	raw, err := formats.ReadTensor(m, t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// WriteGGUF writes m as llama.cpp's GGUF imatrix: general.type, the three
// imatrix.* keys and an in_sum2/counts tensor pair per entry, names sorted,
// and an in_absmax tensor after them for entries that record maxima.
// Entries written from a legacy source keep their values: Sum2 becomes the
// in_sum2 sums and Counts the counts. It returns the names of 64 bytes or
// more, which stock llama.cpp refuses.
func WriteGGUF(w io.Writer, m *Matrix) (long []string, err error) {
	names := m.Names()
	datasets := m.Datasets
	if datasets == nil {
		datasets = []string{}
	}
	meta := formats.Metadata{
		{Key: keyType, Type: formats.TypeString, Value: "imatrix"},
		{Key: keyDatasets, Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeString, Values: datasets}},
		{Key: keyChunkCount, Type: formats.TypeUint32, Value: uint32(m.ChunkCount)},
		{Key: keyChunkSize, Type: formats.TypeUint32, Value: uint32(m.ChunkSize)},
	}
	var tensors []formats.Tensor
	var data [][]float32
	for _, name := range names {
		e, _ := m.Lookup(name)
		nMat := int64(max(len(e.Counts), 1))
		perRow := int64(len(e.Sum2)) / nMat
		if perRow*nMat != int64(len(e.Sum2)) {
			return nil, fmt.Errorf("imatrix: entry %q: %d values do not split into %d matrices", name, len(e.Sum2), nMat)
		}
		shape := []int64{perRow}
		if nMat > 1 {
			shape = []int64{nMat, perRow}
		}
		counts := e.Counts
		if len(counts) == 0 {
			counts = []float32{float32(e.NCall)}
		}
		tensors = append(tensors,
			formats.Tensor{Name: name + suffixSum2, Type: formats.F32, Shape: shape},
			formats.Tensor{Name: name + suffixCounts, Type: formats.F32, Shape: []int64{nMat, 1}})
		data = append(data, e.Sum2, counts)
		longest := name + suffixCounts
		if e.AbsMax != nil {
			if len(e.AbsMax) != len(e.Sum2) {
				return nil, fmt.Errorf("imatrix: entry %q: %d maxima for %d columns", name, len(e.AbsMax), len(e.Sum2))
			}
			tensors = append(tensors, formats.Tensor{Name: name + suffixAbsMax, Type: formats.F32, Shape: shape})
			data = append(data, e.AbsMax)
			longest = name + suffixAbsMax
		}
		if len(longest) >= MaxGGMLName {
			long = append(long, name)
		}
	}
	gw, err := gguf.NewWriter(w, tensors, meta, &gguf.WriterOptions{})
	if err != nil {
		return nil, err
	}
	for _, d := range data {
		if err := binary.Write(gw, binary.LittleEndian, d); err != nil {
			return nil, err
		}
	}
	if err := gw.Close(); err != nil {
		return nil, err
	}
	sort.Strings(long)
	return long, nil
}

// Open reads an imatrix file in either format: GGUF when it starts with the
// GGUF magic, the legacy .dat layout otherwise.
func Open(path string) (*Matrix, error) {
	f, _, err := formats.OpenRegular(path, math.MaxInt64) // readers bound what they allocate
	if err != nil {
		return nil, err
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	if err == nil && string(magic[:]) == "GGUF" {
		g, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		return ReadGGUF(g)
	}
	return OpenDat(path)
}

// Encode writes m to w in the format that path's extension chooses: GGUF
// for .gguf (any case), llama.cpp's legacy .dat for anything else, which is
// what sd-cli's --imat-out writes whatever the name. long lists the GGUF
// entry names of 64 bytes or more, which stock llama.cpp refuses.
func Encode(w io.Writer, path string, m *Matrix) (long []string, err error) {
	if strings.EqualFold(filepath.Ext(path), ".gguf") {
		return WriteGGUF(w, m)
	}
	return nil, WriteDat(w, m)
}
