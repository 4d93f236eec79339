package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// closeProbe is a model that records, when closed, whether the output's
// partial file and the output itself existed.
type closeProbe struct {
	*memModel
	out                    string
	closed, partial, final bool
}

func (c *closeProbe) Close() error {
	if !c.closed {
		_, err1 := os.Stat(c.out + PartialSuffix)
		_, err2 := os.Stat(c.out)
		c.closed, c.partial, c.final = true, err1 == nil, err2 == nil
	}
	return nil
}

// With ReleaseInputs the plan's models are closed after the last byte and
// before the rename (meta --in-place replaces its own input, and Windows
// renames over no open file); without it Run leaves them open.
func TestReleaseInputsBeforeRename(t *testing.T) {
	for _, release := range []bool{true, false} {
		out := filepath.Join(t.TempDir(), "o.fake")
		m := &closeProbe{memModel: newMemModel("in.fake"), out: out}
		src := m.add("w", formats.F32, []int64{4}, make([]byte, 16))
		p := at(&Plan{Outputs: []Output{{Name: "w", Type: formats.F32, Shape: []int64{4}, Producer: Copy(m, src)}}}, out, nil)
		p.Use(m)
		p.Inputs = nil // as meta --in-place does for the file it replaces
		if err := run(t, context.Background(), p, Options{ReleaseInputs: release}); err != nil {
			t.Fatal(err)
		}
		if release && (!m.closed || !m.partial || m.final) {
			t.Errorf("ReleaseInputs: closed %v with the partial file there %v and the output not yet %v", m.closed, m.partial, !m.final)
		}
		if !release && m.closed {
			t.Error("without ReleaseInputs Run closed an input")
		}
		if _, err := os.Stat(out); err != nil {
			t.Error(err)
		}
	}
}
