package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// FuzzChunking runs random plans (shapes, types, chunk sizes, budgets,
// thread counts) and checks that every output holds exactly the bytes its
// producer defines for each row, whatever the chunking.
func FuzzChunking(f *testing.F) {
	f.Add(uint16(10), uint16(16), uint8(0), uint16(100), uint16(400), uint8(2), uint8(3))
	f.Add(uint16(1), uint16(4096), uint8(1), uint16(64), uint16(64), uint8(7), uint8(1))
	f.Add(uint16(0), uint16(32), uint8(2), uint16(1), uint16(1), uint8(1), uint8(2))
	f.Add(uint16(3), uint16(5), uint8(3), uint16(7), uint16(9), uint8(4), uint8(5))
	types := []formats.DType{formats.F32, formats.F16, formats.Q4_0, formats.F4, formats.Q6_K, formats.I8}
	f.Fuzz(func(t *testing.T, rows, cols uint16, typ uint8, chunk, mem uint16, threads, ntensors uint8) {
		dt := types[int(typ)%len(types)]
		var plan Plan
		for i := range int(ntensors%6) + 1 {
			// Rows and columns stay small enough (at most 150 KB a tensor)
			// that an execution costs well under a millisecond; chunk sizes
			// and budgets still cut them into one to thousands of chunks.
			shape := []int64{int64(rows%64) + int64(i), int64(cols % 600)}
			if i == 2 {
				shape = nil // a scalar among the others
			}
			o := Output{Name: string(rune('a' + i)), Type: dt, Shape: shape}
			_, rb, err := o.Rows()
			if err != nil {
				continue // a shape the type cannot hold; the plan check is tested elsewhere
			}
			seed := byte(len(plan.Outputs))
			o.Producer = ProducerFunc(func(_ context.Context, dst []byte, first, n int64, _ *tensor.Scratch) error {
				for j := range dst {
					dst[j] = byte(first+int64(j)/rb) ^ seed
				}
				return nil
			})
			plan.Outputs = append(plan.Outputs, o)
		}
		b, err := runToMemory(at(&plan, "out.fake", nil), Options{
			Threads:    int(threads%8) + 1,
			ChunkBytes: int64(chunk) + 1,
			MaxMemory:  int64(mem) + 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		_, got := parseFake(t, "out.fake", b)
		for i, o := range plan.Outputs {
			rows, rb, _ := o.Rows()
			want := make([]byte, rows*rb)
			for j := range want {
				want[j] = byte(int64(j)/rb) ^ byte(i)
			}
			if !bytes.Equal(got[o.Name], want) {
				t.Fatalf("tensor %q (%s %v): bytes differ", o.Name, o.Type, o.Shape)
			}
		}
	})
}

// runToMemory is Run without the file: the same plan checks, chunking,
// worker pool and writer, into memory. The atomic publish (a temporary
// folder, fsync, rename) cost FuzzChunking milliseconds an execution and
// has tests of its own.
func runToMemory(plan *Plan, opts Options) ([]byte, error) {
	if err := opts.normalise(plan); err != nil {
		return nil, err
	}
	l, err := prepare(plan, &opts)
	if err != nil {
		return nil, err
	}
	tensors, err := plan.Tensors()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw, err := plan.Format.New(&buf, tensors, plan.header())
	if err != nil {
		return nil, err
	}
	if err := execute(context.Background(), plan, l, &opts, tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if int64(buf.Len()) != tw.Size() {
		return nil, fmt.Errorf("wrote %d bytes, the writer announced %d", buf.Len(), tw.Size())
	}
	return buf.Bytes(), nil
}
