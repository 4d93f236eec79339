package imatrix

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// MergeMode says how Merge combines entries that several matrices share.
type MergeMode int

const (
	// MergeLlama sums the squared-activation sums and the counts, so the
	// merged mean is the call-count-weighted average of the means, as
	// llama-imatrix --in-file does.
	MergeLlama MergeMode = iota
	// MergeSDCPP sums the stored values (mean×ncall) and the call counts,
	// as stable-diffusion.cpp does when it loads several --imat-in files.
	MergeSDCPP
)

// ParseMergeMode parses "llama" or "sdcpp".
func ParseMergeMode(s string) (MergeMode, error) {
	switch s {
	case "llama", "":
		return MergeLlama, nil
	case "sdcpp":
		return MergeSDCPP, nil
	}
	return 0, fmt.Errorf("merge mode %q: want llama or sdcpp", s)
}

// Merge combines matrices into a new one: entries in first-seen order,
// shared entries combined by mode (activation maxima by their maximum,
// dropped when one side lacks them), datasets concatenated and chunk counts
// summed. Shared entries must have the same length; files labels errors.
// For legacy .dat inputs (counts equal to ncall) both modes give the same
// stored values; they differ when counts are rows seen (GGUF inputs).
func Merge(files []string, ms []*Matrix, mode MergeMode) (*Matrix, error) {
	out := &Matrix{}
	for k, m := range ms {
		out.Datasets = append(out.Datasets, m.Datasets...)
		out.ChunkCount += m.ChunkCount
		if out.ChunkSize == 0 {
			out.ChunkSize = m.ChunkSize
		}
		for _, e := range m.Entries {
			acc, ok := out.Lookup(e.Name)
			if !ok {
				c := &Entry{Name: e.Name, NCall: e.NCall, Sum2: append([]float32(nil), e.Sum2...), Counts: append([]float32(nil), e.Counts...),
					AbsMax: slices.Clone(e.AbsMax)}
				if mode == MergeSDCPP {
					c.Sum2, c.Counts = e.Stored(), []float32{float32(e.NCall)}
				}
				if err := out.add(c, files[k]); err != nil {
					return nil, err
				}
				continue
			}
			if len(acc.Sum2) != len(e.Sum2) {
				return nil, fmt.Errorf("%s: entry %q has %d values, earlier files had %d", files[k], e.Name, len(e.Sum2), len(acc.Sum2))
			}
			acc.NCall += e.NCall
			acc.AbsMax = maxOf(acc.AbsMax, e.AbsMax)
			switch mode {
			case MergeSDCPP:
				for i, v := range e.Stored() {
					acc.Sum2[i] += v
				}
				acc.Counts = []float32{float32(acc.NCall)}
			default:
				if len(acc.Counts) != len(e.Counts) {
					return nil, fmt.Errorf("%s: entry %q has %d matrices, earlier files had %d", files[k], e.Name, len(e.Counts), len(acc.Counts))
				}
				for i, v := range e.Sum2 {
					acc.Sum2[i] += v
				}
				for i, v := range e.Counts {
					acc.Counts[i] += v
				}
			}
		}
	}
	return out, nil
}

// maxOf is the columnwise maximum of two entries' maxima, nil when either
// is unknown (a maximum over part of the data would understate it).
func maxOf(a, b []float32) []float32 {
	if a == nil || b == nil || len(a) != len(b) {
		return nil
	}
	for i, v := range b {
		a[i] = max(a[i], v)
	}
	return a
}

// Stats summarises one entry for `sdtool imatrix show`.
type Stats struct {
	// Name, NCall and Len (values) identify the entry.
	Name  string
	NCall int
	Len   int
	// Min, Max, Mean and Std describe the mean squared activations.
	Min, Max, Mean, Std float64
	// Top lists the columns with the largest values, largest first.
	Top []Column
}

// Column is one input column's importance.
type Column struct {
	// Index is the column (element of the vector).
	Index int
	// Value is the mean squared activation.
	Value float32
}

// Summarize computes the statistics of an entry and its top n columns.
func Summarize(e *Entry, n int) Stats {
	mean := e.Mean()
	s := Stats{Name: e.Name, NCall: e.NCall, Len: len(mean), Min: math.Inf(1), Max: math.Inf(-1)}
	var sum, sum2 float64
	for _, v := range mean {
		f := float64(v)
		s.Min, s.Max = math.Min(s.Min, f), math.Max(s.Max, f)
		sum += f
		sum2 += f * f
	}
	if len(mean) > 0 {
		s.Mean = sum / float64(len(mean))
		s.Std = math.Sqrt(math.Max(0, sum2/float64(len(mean))-s.Mean*s.Mean))
	}
	idx := make([]int, len(mean))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return mean[idx[a]] > mean[idx[b]] })
	for _, i := range idx[:min(n, len(idx))] {
		s.Top = append(s.Top, Column{Index: i, Value: mean[i]})
	}
	return s
}
