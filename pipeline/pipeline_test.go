package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// toyType is the output type of the toy codec: q8_1 has its block shape
// (32 elements in 36 bytes).
const toyType = formats.Q8_1

// testModel builds a model with tensors of several shapes and kinds,
// including the awkward ones: a scalar, an empty tensor, a 1-D bias, a
// packed sub-byte tensor whose rows split a byte, and a large 2-D weight.
func testModel(t *testing.T) *memModel {
	t.Helper()
	m := newMemModel(filepath.Join(t.TempDir(), "in.fake"))
	m.add("big.weight", formats.F16, []int64{96, 256}, f16Data(96*256, 1))
	m.add("bias", formats.F32, []int64{77}, bytes.Repeat([]byte{1, 2, 3, 4}, 77))
	m.add("scalar", formats.F32, nil, []byte{0, 0, 0x80, 0x3f})
	m.add("empty", formats.F16, []int64{0, 64}, nil)
	m.add("packed", formats.F4, []int64{2, 3}, []byte{1, 2, 3}) // rows of 3 nibbles split bytes
	m.add("conv.weight", formats.F16, []int64{8, 4, 3, 3}, f16Data(8*4*3*3, 2))
	return m
}

// copyPlan copies every tensor of m.
func copyPlan(m formats.Model) *Plan {
	var p Plan
	for _, t := range m.Tensors() {
		src := t
		p.Outputs = append(p.Outputs, Output{Name: t.Name, Type: t.Type, Shape: t.Shape, Producer: Copy(m, t), Source: &src})
	}
	return &p
}

func run(t *testing.T, ctx context.Context, plan *Plan, opts Options) error {
	t.Helper()
	return Run(ctx, plan, opts)
}

func noPartial(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Lstat(out + PartialSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind (%v)", out+PartialSuffix, err)
	}
}

func TestCopyRoundTrip(t *testing.T) {
	m := testModel(t)
	out := filepath.Join(t.TempDir(), "out.fake")
	var calls, last, total int64
	err := run(t, context.Background(), at(copyPlan(m), out, nil), Options{
		Threads:    3,
		ChunkBytes: 4096,
		MaxMemory:  16384,
		Progress: func(d, tot int64) {
			if d < last {
				t.Errorf("progress went back from %d to %d", last, d)
			}
			calls++
			last, total = d, tot
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	noPartial(t, out)
	names, data := readFake(t, out)
	if len(names) != len(m.List) {
		t.Fatalf("%d tensors, want %d", len(names), len(m.List))
	}
	var want int64
	for i, tt := range m.List {
		if names[i] != tt.Name {
			t.Errorf("tensor %d is %q, want %q (header order)", i, names[i], tt.Name)
		}
		if !bytes.Equal(data[tt.Name], m.Data[tt.Name]) {
			t.Errorf("tensor %q: data differs", tt.Name)
		}
		want += tt.Size
	}
	if last != want || total != want {
		t.Errorf("progress ended at %d/%d, want %d/%d", last, total, want, want)
	}
	// 48 KiB of big.weight in 4 KiB chunks alone gives 12 updates.
	if calls < 12 {
		t.Errorf("%d progress calls, want one per chunk", calls)
	}
}

// slowProducer wraps a producer with a delay that depends on the chunk, so
// that chunks complete out of order.
type slowProducer struct {
	Producer
}

func (s slowProducer) Prepare(o *Output) (int64, error) {
	if p, ok := s.Producer.(Preparer); ok {
		return p.Prepare(o)
	}
	return 0, nil
}

func (s slowProducer) Produce(ctx context.Context, dst []byte, first, n int64, sc *tensor.Scratch) error {
	time.Sleep(time.Duration((first*7919)%5) * time.Millisecond)
	return s.Producer.Produce(ctx, dst, first, n, sc)
}

func convertPlan(m *memModel, slow bool) (*Plan, map[string][]byte) {
	var p Plan
	want := map[string][]byte{}
	for _, t := range m.List {
		if t.Type != formats.F16 || t.RowLength()%toyBlock != 0 {
			continue
		}
		var prod Producer = Convert(tensor.Plain(m, t), toyType, encodeToy)
		if slow {
			prod = slowProducer{prod}
		}
		src := t
		p.Outputs = append(p.Outputs, Output{Name: t.Name + ".q", Type: toyType, Shape: t.Shape, Producer: prod, Source: &src})
		// Oracle: the whole tensor decoded and encoded in one call.
		f := make([]float32, t.Elements())
		decodeF16(f, m.Data[t.Name])
		b := make([]byte, len(f)/toyBlock*toyBlockBytes)
		encodeToy(b, f, int(t.RowLength()))
		want[t.Name+".q"] = b
	}
	return &p, want
}

func TestDeterministicAcrossThreads(t *testing.T) {
	m := newMemModel("in.fake")
	m.add("a", formats.F16, []int64{200, 64}, f16Data(200*64, 3))
	m.add("b", formats.F16, []int64{33, 256}, f16Data(33*256, 4))
	m.add("c", formats.F16, []int64{1, 32}, f16Data(32, 5))
	m.add("d", formats.F16, []int64{0, 32}, nil)
	dir := t.TempDir()
	var first []byte
	for _, threads := range []int{1, 2, 7} {
		plan, want := convertPlan(m, true)
		out := filepath.Join(dir, fmt.Sprintf("out%d.fake", threads))
		if err := run(t, context.Background(), at(plan, out, nil), Options{Threads: threads, ChunkBytes: 1000, MaxMemory: 8000}); err != nil {
			t.Fatal(err)
		}
		_, data := readFake(t, out)
		for name, w := range want {
			if !bytes.Equal(data[name], w) {
				t.Errorf("threads=%d: tensor %q differs from the one-shot conversion", threads, name)
			}
		}
		b, _ := os.ReadFile(out)
		if first == nil {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Errorf("threads=%d: output differs from threads=1", threads)
		}
	}
}

// recorder is a producer that records its calls and fills rows with a
// pattern derived from the row index.
type recorder struct {
	mu       sync.Mutex
	rowBytes int64
	seen     map[int64]int
	maxChunk int64
}

func (r *recorder) Produce(_ context.Context, dst []byte, first, n int64, _ *tensor.Scratch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if int64(len(dst)) != n*r.rowBytes {
		return fmt.Errorf("dst of %d bytes for %d rows of %d", len(dst), n, r.rowBytes)
	}
	for i := first; i < first+n; i++ {
		r.seen[i]++
	}
	r.maxChunk = max(r.maxChunk, int64(len(dst)))
	for i := range dst {
		dst[i] = byte(first + int64(i)/r.rowBytes)
	}
	return nil
}

func TestChunking(t *testing.T) {
	cases := []struct {
		name      string
		typ       formats.DType
		shape     []int64
		chunk     int64
		maxMem    int64
		wantChunk int64 // largest chunk expected
	}{
		{"rows", formats.F32, []int64{1000, 16}, 1024, 4096, 1024},
		{"uneven", formats.F32, []int64{1001, 10}, 1000, 4000, 1000},
		{"rows over chunk", formats.F32, []int64{1001, 10}, 999, 4000, 960},
		{"row over budget", formats.F32, []int64{3, 4096}, 1024, 4096, 16384},
		{"scalar", formats.F32, nil, 1024, 4096, 4},
		{"one block", formats.Q4_0, []int64{32}, 1024, 4096, 18},
		{"packed", formats.F4, []int64{2, 5}, 1024, 4096, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Output{Name: "x", Type: c.typ, Shape: c.shape}
			rows, rb, err := o.Rows()
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{rowBytes: rb, seen: map[int64]int{}}
			o.Producer = rec
			out := filepath.Join(t.TempDir(), "out.fake")
			if err := run(t, context.Background(), at(&Plan{Outputs: []Output{o}}, out, nil), Options{Threads: 4, ChunkBytes: c.chunk, MaxMemory: c.maxMem}); err != nil {
				t.Fatal(err)
			}
			if int64(len(rec.seen)) != rows {
				t.Errorf("%d rows produced, want %d", len(rec.seen), rows)
			}
			for r, n := range rec.seen {
				if n != 1 || r < 0 || r >= rows {
					t.Errorf("row %d produced %d times", r, n)
				}
			}
			if rec.maxChunk != c.wantChunk {
				t.Errorf("largest chunk %d bytes, want %d", rec.maxChunk, c.wantChunk)
			}
			_, data := readFake(t, out)
			for i, b := range data["x"] {
				if b != byte(int64(i)/rb) {
					t.Fatalf("byte %d is %d, want row index %d", i, b, int64(i)/rb)
				}
			}
		})
	}
}

// meteredWriter is a slow fake writer that checks the bytes produced but
// not yet written against the budget.
type meteredWriter struct {
	formats.TensorWriter
	inFlight *atomic.Int64
	peak     *atomic.Int64
}

func (m meteredWriter) Write(p []byte) (int, error) {
	time.Sleep(200 * time.Microsecond)
	n, err := m.TensorWriter.Write(p)
	m.inFlight.Add(-int64(n))
	return n, err
}

func TestMemoryBudgetInFlight(t *testing.T) {
	var inFlight, peak atomic.Int64
	const rowBytes, maxMem = 256, 4096
	prod := ProducerFunc(func(_ context.Context, dst []byte, _, _ int64, _ *tensor.Scratch) error {
		v := inFlight.Add(int64(len(dst)))
		for {
			p := peak.Load()
			if v <= p || peak.CompareAndSwap(p, v) {
				break
			}
		}
		return nil
	})
	plan := &Plan{Outputs: []Output{{Name: "w", Type: formats.F32, Shape: []int64{400, rowBytes / 4}, Producer: prod}}}
	out := filepath.Join(t.TempDir(), "out.fake")
	err := run(t, context.Background(), at(plan, out, func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
		fw, err := newFakeWriter(w, ts)
		return meteredWriter{fw, &inFlight, &peak}, err
	}), Options{
		Threads:    8,
		MaxMemory:  maxMem,
		ChunkBytes: 1024,
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > maxMem || p < 2048 {
		t.Errorf("peak of %d bytes in flight, want within the %d budget and above two chunks", p, maxMem)
	}
}

func TestConvertReshapeAndChecks(t *testing.T) {
	m := newMemModel("in.fake")
	src := m.add("w", formats.F16, []int64{4, 64}, f16Data(256, 9))
	// A reshape to rows of 32 (whole f16 "blocks") converts the same elements.
	f := make([]float32, 256)
	decodeF16(f, m.Data["w"])
	want := make([]byte, 8*toyBlockBytes)
	encodeToy(want, f, 32)
	plan := &Plan{Outputs: []Output{{Name: "w", Type: toyType, Shape: []int64{8, 32}, Producer: Convert(tensor.Plain(m, src), toyType, encodeToy)}}}
	out := filepath.Join(t.TempDir(), "out.fake")
	if err := run(t, context.Background(), at(plan, out, nil), Options{ChunkBytes: 100}); err != nil {
		t.Fatal(err)
	}
	if _, data := readFake(t, out); !bytes.Equal(data["w"], want) {
		t.Error("reshaped conversion differs")
	}

	bad := []struct {
		name string
		o    Output
		want string
	}{
		{"elements", Output{Name: "w", Type: toyType, Shape: []int64{4, 32}, Producer: Convert(tensor.Plain(m, src), toyType, encodeToy)}, "has 128 elements"},
		{"type", Output{Name: "w", Type: formats.Q8_0, Shape: []int64{4, 64}, Producer: Convert(tensor.Plain(m, src), toyType, encodeToy)}, "encodes q8_1"},
		{"no codec", Output{Name: "w", Type: toyType, Shape: []int64{4, 64}, Producer: Convert(tensor.Plain(m, src), toyType, nil)}, "no encoder"},
		{"copy type", Output{Name: "w", Type: formats.BF16, Shape: []int64{4, 64}, Producer: Copy(m, src)}, "cannot copy f16"},
		{"copy size", Output{Name: "w", Type: formats.F16, Shape: []int64{2, 64}, Producer: Copy(m, src)}, "needs 256 bytes"},
		{"block", Output{Name: "w", Type: formats.Q4_0, Shape: []int64{4, 48}, Producer: Copy(m, src)}, "block size"},
		{"no producer", Output{Name: "w", Type: formats.F16, Shape: []int64{4, 64}}, "no producer"},
		{"negative", Output{Name: "w", Type: formats.F16, Shape: []int64{-1, 64}}, "negative"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.fake")
			err := run(t, context.Background(), at(&Plan{Outputs: []Output{c.o}}, out, nil), Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"w"`) {
				t.Fatalf("error %v, want one naming the tensor and saying %q", err, c.want)
			}
			if _, err := os.Lstat(out); err == nil {
				t.Error("output created for an invalid plan")
			}
			noPartial(t, out)
		})
	}
}

func TestDuplicateNames(t *testing.T) {
	p := &Plan{Outputs: []Output{
		{Name: "a", Type: formats.F32, Shape: []int64{0}},
		{Name: "a", Type: formats.F32, Shape: []int64{0}},
	}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("Validate: %v", err)
	}
}

func TestEncodeRows(t *testing.T) {
	// A stand-in quantizer that records the weights of each call.
	var calls [][]float32
	q := func(dst []byte, src, w []float32) {
		calls = append(calls, w)
		for i := range dst {
			dst[i] = byte(len(src))
		}
	}
	enc := EncodeRows(formats.Q8_0, q, nil)
	dst := make([]byte, 3*34)
	if err := enc(dst, make([]float32, 96), 32); err != nil || len(calls) != 1 || dst[0] != 96 {
		t.Fatalf("unweighted: %v, %d calls, dst[0]=%d", err, len(calls), dst[0])
	}
	calls = nil
	w := make([]float32, 32)
	enc = EncodeRows(formats.Q8_0, q, w)
	if err := enc(dst, make([]float32, 96), 32); err != nil || len(calls) != 3 || dst[0] != 32 {
		t.Fatalf("weighted: %v, %d calls, dst[0]=%d", err, len(calls), dst[0])
	}
	if err := enc(dst, make([]float32, 96), 96); err == nil {
		t.Fatal("weights of the wrong length accepted")
	}
}

func TestLayoutMismatch(t *testing.T) {
	m := testModel(t)
	out := filepath.Join(t.TempDir(), "out.fake")
	err := run(t, context.Background(), at(copyPlan(m), out, func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
		ts = append([]formats.Tensor(nil), ts...)
		ts[1].Size++
		return newFakeWriter(w, ts)
	}), Options{})
	if err == nil || !strings.Contains(err.Error(), `"bias"`) {
		t.Fatalf("error %v, want a layout mismatch on bias", err)
	}
	noPartial(t, out)
}

func TestDebugLogPerTensor(t *testing.T) {
	m := testModel(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	out := filepath.Join(t.TempDir(), "out.fake")
	if err := run(t, context.Background(), at(copyPlan(m), out, nil), Options{Logger: log}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range m.List {
		if !strings.Contains(buf.String(), "tensor="+tt.Name+" ") {
			t.Errorf("no log record for %q in:\n%s", tt.Name, buf.String())
		}
	}
	if n := strings.Count(buf.String(), "wrote tensor"); n != len(m.List) {
		t.Errorf("%d records, want %d", n, len(m.List))
	}
}

func TestSummary(t *testing.T) {
	m := newMemModel("in")
	a := m.add("a", formats.F16, []int64{4, 64}, make([]byte, 512))
	b := m.add("b", formats.F32, []int64{64}, make([]byte, 256))
	p := &Plan{Outputs: []Output{
		{Name: "a", Type: formats.Q8_0, Shape: a.Shape, Source: &a},
		{Name: "b", Type: formats.F32, Shape: b.Shape, Source: &b},
		{Name: "new", Type: formats.Q4_0, Shape: []int64{2, 32}},
	}}
	s, err := p.Summary()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tensors) != 3 || s.Tensors[0].SourceType != "f16" || s.Tensors[0].Type != "q8_0" ||
		s.Tensors[0].Bytes != 8*34 || s.Tensors[0].SourceBytes != 512 || s.Tensors[2].SourceType != "" {
		t.Fatalf("rows: %+v", s.Tensors)
	}
	if s.Tensors[0].BitsPerWeight != 8.5 || s.Elements != 256+64+64 || s.Bytes != 272+256+36 || s.SourceBytes != 768 {
		t.Errorf("totals: %+v", s)
	}
	if want := float64(272+256+36) * 8 / 384; s.BitsPerWeight != want {
		t.Errorf("bpw %v, want %v", s.BitsPerWeight, want)
	}
	if want := float64(768) * 8 / 320; s.SourceBitsPerWeight != want {
		t.Errorf("source bpw %v, want %v", s.SourceBitsPerWeight, want)
	}
	if len(s.ByType) != 3 || s.ByType[0].Type != "f32" || s.ByType[1].Type != "q4_0" || s.ByType[2].Type != "q8_0" {
		t.Errorf("by type: %+v", s.ByType)
	}
	if _, err := (&Plan{Outputs: []Output{{Name: "x", Type: formats.Q4_0, Shape: []int64{33}}}}).Summary(); err == nil {
		t.Error("summary of an impossible shape succeeded")
	}
}

func TestConvertSteadyStateAllocs(t *testing.T) {
	m := newMemModel("in")
	src := m.add("w", formats.F16, []int64{64, 256}, f16Data(64*256, 8))
	p := Convert(tensor.Plain(m, src), toyType, encodeToy)
	o := Output{Name: "w", Type: toyType, Shape: src.Shape}
	if _, err := p.(Preparer).Prepare(&o); err != nil {
		t.Fatal(err)
	}
	_, rb, _ := o.Rows()
	var s tensor.Scratch
	dst := make([]byte, 8*rb)
	row := int64(0)
	allocs := testing.AllocsPerRun(20, func() {
		if err := p.Produce(context.Background(), dst, row, 8, &s); err != nil {
			t.Fatal(err)
		}
		row = (row + 8) % 64
	})
	if allocs != 0 {
		t.Errorf("%v allocations per chunk in steady state", allocs)
	}
	c := Copy(m, src)
	raw := make([]byte, 8*512)
	allocs = testing.AllocsPerRun(20, func() {
		if err := c.Produce(context.Background(), raw, 8, 8, &s); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("copy: %v allocations per chunk", allocs)
	}
}

// TestProducersRunInParallel holds the first chunks at a barrier that opens
// only when Threads of them run at once, so a serialised engine fails (after
// a timeout) instead of passing slowly.
func TestProducersRunInParallel(t *testing.T) {
	const threads = 4
	var mu sync.Mutex
	arrived := 0
	open := make(chan struct{})
	prod := ProducerFunc(func(_ context.Context, dst []byte, first, n int64, _ *tensor.Scratch) error {
		mu.Lock()
		arrived++
		if arrived == threads {
			close(open)
		}
		mu.Unlock()
		select {
		case <-open:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("producers did not run concurrently")
		}
	})
	// Chunks spread over two tensors: parallelism must cross tensor boundaries.
	plan := &Plan{Outputs: []Output{
		{Name: "a", Type: formats.F32, Shape: []int64{2, 256}, Producer: prod},
		{Name: "b", Type: formats.F32, Shape: []int64{6, 256}, Producer: prod},
	}}
	out := filepath.Join(t.TempDir(), "out.fake")
	if err := run(t, context.Background(), at(plan, out, nil), Options{Threads: threads, ChunkBytes: 1024, MaxMemory: 1 << 20}); err != nil {
		t.Fatal(err)
	}
}
