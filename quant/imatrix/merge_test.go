package imatrix

import "testing"

func TestMergeModes(t *testing.T) {
	// Two legacy entries: stored values are mean×ncall.
	a := &Matrix{ChunkCount: 2, Entries: []*Entry{{Name: "w", NCall: 2, Sum2: []float32{2, 4}, Counts: []float32{2}}}}
	b := &Matrix{ChunkCount: 1, Entries: []*Entry{{Name: "w", NCall: 1, Sum2: []float32{4, 1}, Counts: []float32{1}},
		{Name: "v", NCall: 1, Sum2: []float32{9}, Counts: []float32{1}}}}
	for _, mode := range []MergeMode{MergeLlama, MergeSDCPP} {
		m, err := Merge([]string{"a", "b"}, []*Matrix{a, b}, mode)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := m.Lookup("w")
		// Mean: (2+4)/3 and (4+1)/3, the call-weighted average of 1,2 (x2) and 4,1 (x1).
		if got := w.Mean(); got[0] != 2 || got[1] != float32(5)/3 {
			t.Errorf("mode %d: mean %v", mode, got)
		}
		if got := w.Stored(); got[0] != 6 || got[1] != 5 || w.NCall != 3 {
			t.Errorf("mode %d: stored %v ncall %d", mode, got, w.NCall)
		}
		if len(m.Entries) != 2 || m.ChunkCount != 3 {
			t.Errorf("mode %d: %d entries, %d chunks", mode, len(m.Entries), m.ChunkCount)
		}
	}
	// GGUF-style counts (rows seen, not calls) make the modes differ:
	// llama sums rows, sd.cpp sums mean×ncall.
	g1 := &Matrix{Entries: []*Entry{{Name: "w", NCall: 1, Sum2: []float32{10}, Counts: []float32{10}}}}
	g2 := &Matrix{Entries: []*Entry{{Name: "w", NCall: 1, Sum2: []float32{30}, Counts: []float32{10}}}}
	l, _ := Merge([]string{"1", "2"}, []*Matrix{g1, g2}, MergeLlama)
	s, _ := Merge([]string{"1", "2"}, []*Matrix{g1, g2}, MergeSDCPP)
	lw, _ := l.Lookup("w")
	sw, _ := s.Lookup("w")
	if lw.Mean()[0] != 2 || sw.Stored()[0] != 4 || sw.Mean()[0] != 2 {
		t.Errorf("llama mean %v, sdcpp stored %v", lw.Mean(), sw.Stored())
	}
	bad := &Matrix{Entries: []*Entry{{Name: "w", NCall: 1, Sum2: []float32{1, 2, 3}, Counts: []float32{1}}}}
	if _, err := Merge([]string{"a", "bad"}, []*Matrix{a, bad}, MergeLlama); err == nil {
		t.Error("length mismatch accepted")
	}
	if _, err := ParseMergeMode("avg"); err == nil {
		t.Error("bad mode accepted")
	}
}

func TestSummarize(t *testing.T) {
	e := &Entry{Name: "w", NCall: 2, Sum2: []float32{2, 8, 4, 6}, Counts: []float32{2}}
	s := Summarize(e, 2)
	if s.Min != 1 || s.Max != 4 || s.Mean != 2.5 || len(s.Top) != 2 || s.Top[0].Index != 1 || s.Top[1].Index != 3 {
		t.Errorf("%+v", s)
	}
}
