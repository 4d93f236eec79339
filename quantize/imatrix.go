package quantize

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/quant/imatrix"
)

// Importance is the importance matrix quantize uses: one mean vector per
// weight, combined from one or more files with llama.cpp's arithmetic.
type Importance struct {
	// Files are the paths read, in order.
	Files []string
	// Datasets are the calibration datasets the files name.
	Datasets []string
	// Chunks is the total chunk count of the files.
	Chunks int
	// Entries maps a weight name to its combined statistics.
	Entries map[string]*imatrix.Entry
	// Order lists the entry names in first-seen order.
	Order []string
}

// LoadImportance reads the --imatrix files (legacy .dat or GGUF) and
// combines them as llama.cpp does: the mean of an entry is its summed
// squared activations over its call count (Entry.Mean), and several files
// are combined by adding sums and counts, which is the call-count-weighted
// average of their means. Non-finite or negative values are refused, and
// so are entries whose lengths differ between files.
func LoadImportance(files []string) (*Importance, error) {
	imp := &Importance{Entries: map[string]*imatrix.Entry{}}
	for _, path := range files {
		m, err := imatrix.Open(path)
		if err != nil {
			return nil, err
		}
		if err := m.Validate(path); err != nil {
			return nil, err
		}
		imp.Files = append(imp.Files, path)
		imp.Datasets = append(imp.Datasets, m.Datasets...)
		imp.Chunks += m.ChunkCount
		for _, e := range m.Entries {
			for i, c := range e.Counts {
				if f := float64(c); math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
					return nil, fmt.Errorf("%s: entry %q: count %d is %v (must be finite and non-negative)", path, e.Name, i, c)
				}
			}
			counts := e.Counts
			if len(counts) == 0 {
				counts = []float32{float32(max(e.NCall, 1))}
			}
			old, ok := imp.Entries[e.Name]
			if !ok {
				imp.Entries[e.Name] = &imatrix.Entry{Name: e.Name, Sum2: append([]float32(nil), e.Sum2...),
					Counts: append([]float32(nil), counts...), NCall: e.NCall, AbsMax: slices.Clone(e.AbsMax)}
				imp.Order = append(imp.Order, e.Name)
				continue
			}
			if len(old.Sum2) != len(e.Sum2) || len(old.Counts) != len(counts) {
				return nil, fmt.Errorf("%s: entry %q has %d values in %d matrices, %s has %d in %d",
					path, e.Name, len(e.Sum2), len(counts), imp.Files[0], len(old.Sum2), len(old.Counts))
			}
			for i, v := range e.Sum2 {
				old.Sum2[i] += v
			}
			for i, c := range counts {
				old.Counts[i] += c
			}
			old.NCall += e.NCall
			if old.AbsMax != nil && len(e.AbsMax) == len(old.AbsMax) {
				for i, v := range e.AbsMax {
					old.AbsMax[i] = max(old.AbsMax[i], v)
				}
			} else {
				old.AbsMax = nil // a maximum over part of the data would understate it
			}
		}
	}
	return imp, nil
}

// Vector returns the importance vector of a weight whose rows hold rowLen
// elements: the entry's mean, checked for length. ok is false when there
// is no entry.
func (imp *Importance) Vector(name string, rowLen int64) (v []float32, ok bool, err error) {
	e, ok := imp.Entries[name]
	if !ok {
		return nil, false, nil
	}
	if int64(len(e.Sum2)) != rowLen {
		if len(e.Counts) > 1 {
			return nil, true, fmt.Errorf("imatrix entry %q holds %d matrices (experts); only dense weights are supported", name, len(e.Counts))
		}
		return nil, true, fmt.Errorf("imatrix entry %q has %d values, the tensor's rows have %d elements", name, len(e.Sum2), rowLen)
	}
	mean := e.Mean()
	for i, x := range mean {
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, true, fmt.Errorf("imatrix entry %q: mean value %d is %v", name, i, x)
		}
	}
	return mean, true, nil
}

// InputMax returns the largest activation magnitude the imatrix recorded
// for the weight's inputs (GGUF files that generate --imatrix-out wrote);
// ok is false when no file recorded one for every run.
func (imp *Importance) InputMax(name string) (float32, bool) {
	e, ok := imp.Entries[name]
	if !ok {
		return 0, false
	}
	return e.Max()
}

// File returns the value of quantize.imatrix.file: the paths joined by commas.
func (imp *Importance) File() string { return strings.Join(imp.Files, ",") }

// Dataset returns the value of quantize.imatrix.dataset: the datasets joined by commas.
func (imp *Importance) Dataset() string { return strings.Join(imp.Datasets, ",") }
