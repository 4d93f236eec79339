package pipeline

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// sink is one plan's output being written: one file, or the shards of a
// split GGUF, each with its digest when asked.
type sink struct {
	// written counts the non-finite values of each output written (by
	// output index), for the outputs whose producers do not count them.
	written []int64
	set     *fileSet
	sums    []hash.Hash // nil without digests
	bws     []*bufio.Writer
	tws     []formats.TensorWriter // each file's format writer
	tw      formats.TensorWriter   // what the plan's data is written to
}

// openSink creates plan p's files (its shards when p.Split is active) and
// their writers, with a SHA-256 of each file when digest is set; on
// failure nothing of it is left.
func openSink(p *Plan, tensors []formats.Tensor, o PublishOptions, digest bool) (*sink, error) {
	paths, shards, err := p.Shards()
	if err != nil {
		return nil, err
	}
	set, err := createSet(paths, o)
	if err != nil {
		return nil, err
	}
	s := &sink{set: set, written: make([]int64, len(p.Outputs))}
	if shards != nil && len(paths) > len(shards) {
		// The safetensors index: known now, written at once.
		idx, err := safetensorsIndex(paths, shards, tensors)
		if err == nil {
			_, err = set.files[len(shards)].Write(idx)
		}
		if err != nil {
			return nil, set.abort(context.Background(), fmt.Errorf("%s: %w", paths[len(shards)], err))
		}
	}
	ws := make([]io.Writer, max(len(shards), 1))
	for k := range ws {
		var w io.Writer = set.files[k]
		if digest {
			sum := sha256.New()
			w = io.MultiWriter(set.files[k], sum)
			s.sums = append(s.sums, sum)
		}
		bw := bufio.NewWriterSize(w, writeBufferBytes)
		s.bws, ws[k] = append(s.bws, bw), bw
	}
	if shards == nil {
		s.tw, err = p.Format.New(ws[0], tensors, p.header())
		s.tws = []formats.TensorWriter{s.tw}
	} else {
		var sw *shardWriter
		sw, err = newShardWriter(p, paths, shards, ws, tensors)
		if err == nil {
			s.tw, s.tws = sw, sw.tws
		}
	}
	if err == nil {
		err = checkLayout(s.tw, tensors)
	}
	if err != nil {
		return nil, set.abort(context.Background(), err)
	}
	return s, nil
}

// checkLayout refuses a writer whose layout disagrees with the plan's
// sizes: the chunks are cut from the plan's sizes, so a writer that
// disagrees about any tensor would misplace every byte after it. A writer
// that gives its layout a tensor at a time is checked without a copy of
// every descriptor.
func checkLayout(tw formats.TensorWriter, tensors []formats.Tensor) error {
	var n int
	var at func(int) formats.Tensor
	if tl, ok := tw.(formats.TensorLayout); ok {
		n, at = tl.NumTensors(), tl.TensorAt
	} else {
		lay := tw.Layout()
		n, at = len(lay), func(i int) formats.Tensor { return lay[i] }
	}
	if n != len(tensors) {
		return fmt.Errorf("the writer lays out %d tensors, the plan has %d", n, len(tensors))
	}
	for i := range n {
		if t := at(i); t.Size != tensors[i].Size || t.Name != tensors[i].Name {
			return fmt.Errorf("tensor %q: the writer lays out %q with %d bytes, the plan has %d",
				tensors[i].Name, t.Name, t.Size, tensors[i].Size)
		}
	}
	return nil
}

// finish closes the writers, flushes and checks every file, and says what
// was written: for a split output, the first shard with the size of all
// and each shard in Shards. Errors about the first file are left for the
// abort to prefix with its path; later shards are named.
func (s *sink) finish() (Written, error) {
	if err := s.tw.Close(); err != nil {
		return Written{}, err
	}
	var w Written
	for k, bw := range s.bws {
		err := bw.Flush()
		if n, serr := s.set.files[k].Size(); err == nil && serr == nil && n != s.tws[k].Size() {
			err = fmt.Errorf("wrote %d bytes, the writer announced %d", n, s.tws[k].Size())
		}
		if err != nil && k > 0 {
			err = fmt.Errorf("%s: %w", s.set.paths[k], err)
		}
		if err != nil {
			return Written{}, err
		}
		one := Written{Path: s.set.paths[k], Bytes: s.tws[k].Size()}
		if s.sums != nil {
			copy(one.SHA256[:], s.sums[k].Sum(nil))
		}
		if k == 0 {
			w = one
		}
		if len(s.bws) > 1 {
			w.Shards = append(w.Shards, one)
		}
	}
	w.Bytes = s.tw.Size()
	return w, nil
}

// abortSinks removes every sink's partial files after err and returns the
// error of sink at, which names its file.
func abortSinks(ctx context.Context, sinks []*sink, err error, at int) error {
	if len(sinks) == 0 {
		return err
	}
	out := err
	for i, s := range sinks {
		if e := s.set.abort(ctx, err); i == at {
			out = e
		}
	}
	return out
}

// commitSinks publishes every plan's files in order. A commit that fails
// leaves the plans before it published, returns them, and names them in
// the error; the failing plan's shards and every later plan are removed.
func commitSinks(plans []*Plan, sinks []*sink, out []Written) ([]Written, error) {
	for i, s := range sinks {
		if err := s.set.commit(); err != nil {
			for _, t := range sinks[i+1:] {
				t.set.abort(context.Background(), err)
			}
			if i > 0 {
				// Complete files are not taken back; say which exist so
				// that a rerun (or a clean-up) knows.
				done := make([]string, i)
				for j := range done {
					done[j] = plans[j].Path
				}
				err = fmt.Errorf("%w (already published, complete: %s)", err, strings.Join(done, ", "))
			}
			return out[:i], err
		}
	}
	return out, nil
}
