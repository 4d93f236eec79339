package pipeline

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// The dry-run table has one line per output with its source type, shape
// change and note; a SOURCE column only when names or files differ; and a
// summary with totals over the outputs with a source, per type, and notes.
func TestWriteTable(t *testing.T) {
	m := newMemModel("in.safetensors")
	w := m.add("w", formats.F16, []int64{4, 64}, make([]byte, 512))
	b := m.add("b", formats.F32, []int64{4, 1}, make([]byte, 16))
	p := &Plan{Path: "out.gguf", Outputs: []Output{
		{Name: "w", Type: formats.Q8_0, Shape: []int64{4, 64}, Source: &w, Producer: Copy(m, w), Note: "mix: q8_0"},
		{Name: "b", Type: formats.F32, Shape: []int64{4}, Source: &b, From: "i8x", Note: "stored 1-D"},
		{Name: "marker", Type: formats.U8, Shape: []int64{3}},
	}, Notes: []string{"sdcpp:   can load it"}}
	var out bytes.Buffer
	if err := p.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "TENSOR FROM TO SHAPE BYTES IN BYTES OUT NOTE" {
		t.Errorf("header %q", lines[0])
	}
	// Compare with the columns' spacing folded.
	var folded []string
	for _, l := range lines {
		folded = append(folded, strings.Join(strings.Fields(l), " "))
	}
	text := strings.Join(folded, "\n")
	for _, want := range []string{
		"w f16 q8_0 [4, 64] 512 272 mix: q8_0",
		"b i8x f32 [4] (was [4, 1]) 16 16 stored 1-D",
		"marker u8 [3] 0 3",
		"out.gguf: 3 tensors, 260 parameters: tensor data 528 B -> 291 B (8.95 bits per weight)",
		"q8_0 1 tensor 272 B", "u8 1 tensor 3 B", "sdcpp: can load it",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// A renamed output brings the SOURCE column.
	p.Outputs[0].Name = "model.w"
	out.Reset()
	p.WriteTable(&out)
	if !strings.Contains(out.String(), "SOURCE") || !strings.Contains(out.String(), "in.safetensors:w") {
		t.Errorf("no SOURCE column for a renamed output:\n%s", out.String())
	}
}

// Check builds the header: what the format refuses is a plan error naming
// the output.
func TestCheck(t *testing.T) {
	gguf := formats.Creator{Name: "x", New: func(_ io.Writer, ts []formats.Tensor, _ formats.WriteOptions) (formats.TensorWriter, error) {
		for _, t := range ts {
			if t.Type == formats.U8 {
				return nil, fmt.Errorf("tensor %q: u8 is not allowed", t.Name)
			}
		}
		return newFakeWriter(io.Discard, ts)
	}}
	p := &Plan{Path: "o.x", Format: gguf, Outputs: []Output{{Name: "a", Type: formats.U8, Shape: []int64{0}}}}
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), `o.x: tensor "a": u8 is not allowed`) {
		t.Errorf("Check = %v", err)
	}
	p.Outputs[0].Type = formats.F32
	if err := p.Check(); err != nil {
		t.Errorf("Check = %v", err)
	}
	if err := (&Plan{Path: "o.x"}).Check(); err == nil {
		t.Error("a plan without a format passed Check")
	}
}

// Use records every file of a model and Close closes it.
func TestUseClose(t *testing.T) {
	m := &closeCounter{memModel: newMemModel("a.safetensors")}
	var p Plan
	p.Use(m)
	if len(p.Inputs) != 1 || p.Inputs[0] != "a.safetensors" {
		t.Errorf("inputs %v", p.Inputs)
	}
	p.Close()
	p.Close()
	if m.closed != 1 {
		t.Errorf("closed %d times", m.closed)
	}
}

type closeCounter struct {
	*memModel
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }
