package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// Shards returns the files the plan writes: Path alone, or when Split is
// active the shards with the metadata and tensor range of each: those of
// a split GGUF (PREFIX-00001-of-0000N.gguf, PREFIX being Path without
// .gguf), or Hugging Face's safetensors shards followed by their index
// (see safetensorsShards), one path more than shards.
func (p *Plan) Shards() ([]string, []gguf.Shard, error) {
	if !p.Split.Active() {
		return []string{p.Path}, nil, nil
	}
	tensors, err := p.Tensors()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	switch p.Format.Name {
	case "safetensors":
		return p.safetensorsShards(tensors)
	case "gguf":
	default:
		return nil, nil, fmt.Errorf("%s: %s outputs are not split", p.Path, p.Format.Name)
	}
	shards, err := gguf.PlanSplit(p.Header.Metadata, tensors, p.Split)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	paths := make([]string, len(shards))
	for k := range shards {
		paths[k] = gguf.SplitPath(gguf.SplitPrefix(p.Path), k+1, len(shards))
	}
	return paths, shards, nil
}

// shardWriter is a formats.TensorWriter over the writers of several
// shards: the data of the first shard's tensors goes to its writer, then
// the next shard's, in order.
type shardWriter struct {
	paths []string
	tws   []formats.TensorWriter
	data  []int64 // tensor data each shard takes
	cur   int     // shard receiving data
	done  int64   // bytes of it written
}

// newShardWriter returns the writer of the shards of p's tensors, shard k
// written to ws[k]: a GGUF with gguf-split's layout (dims trimmed as
// p.Header says), or a file of p's format with p's header.
func newShardWriter(p *Plan, paths []string, shards []gguf.Shard, ws []io.Writer, tensors []formats.Tensor) (*shardWriter, error) {
	sw := &shardWriter{paths: paths}
	opts := &gguf.WriterOptions{TrimDims: p.Header.TrimDims, PadEnd: true}
	for k, sh := range shards {
		part := tensors[sh.First : sh.First+sh.Count]
		var tw formats.TensorWriter
		var err error
		if p.Format.Name == "gguf" {
			tw, err = gguf.NewWriter(ws[k], part, sh.Metadata, opts)
		} else {
			h := p.header()
			h.Name, h.Metadata = paths[k], sh.Metadata
			tw, err = p.Format.New(ws[k], part, h)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", paths[k], err)
		}
		var data int64
		for _, t := range part {
			data += t.Size
		}
		sw.tws, sw.data = append(sw.tws, tw), append(sw.data, data)
	}
	return sw, nil
}

// Write routes p to the shards in order.
func (s *shardWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if s.cur == len(s.tws) {
			return n, errors.New("more tensor data than the shards hold")
		}
		left := s.data[s.cur] - s.done
		if left == 0 {
			s.cur, s.done = s.cur+1, 0
			continue
		}
		k := int(min(int64(len(p)), left))
		m, err := s.tws[s.cur].Write(p[:k])
		n, s.done, p = n+m, s.done+int64(m), p[m:]
		if err == nil && m < k {
			err = io.ErrShortWrite
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", s.paths[s.cur], err)
		}
	}
	return n, nil
}

// Close closes every shard's writer.
func (s *shardWriter) Close() error {
	for k, tw := range s.tws {
		if err := tw.Close(); err != nil {
			return fmt.Errorf("%s: %w", s.paths[k], err)
		}
	}
	return nil
}

// Layout returns every shard's layout in order, each tensor's File its shard.
func (s *shardWriter) Layout() []formats.Tensor {
	var out []formats.Tensor
	for k, tw := range s.tws {
		for _, t := range tw.Layout() {
			t.File = s.paths[k]
			out = append(out, t)
		}
	}
	return out
}

// Size returns the bytes of all shards together.
func (s *shardWriter) Size() int64 {
	var n int64
	for _, tw := range s.tws {
		n += tw.Size()
	}
	return n
}

// fileSet is several outputs that make one whole (the shards of a split
// model): each is written through CreateAtomic, and the set is published
// only when every file is complete. A commit that fails part-way removes
// the shards already renamed, so that the set is complete or absent.
type fileSet struct {
	paths []string
	files []*AtomicFile
}

// createSet creates PATH.partial for every path, removing those already
// created when one fails.
func createSet(paths []string, o PublishOptions) (*fileSet, error) {
	s := &fileSet{paths: paths}
	for _, p := range paths {
		f, err := CreateAtomic(p, o)
		if err != nil {
			return nil, s.abort(context.Background(), err)
		}
		s.files = append(s.files, f)
	}
	return s, nil
}

// abort removes every partial file and returns the first file's error
// (err itself when nothing was created yet).
func (s *fileSet) abort(ctx context.Context, err error) error {
	if len(s.files) == 0 {
		return err
	}
	first := s.files[0].Abort(ctx, err)
	for _, f := range s.files[1:] {
		f.Abort(ctx, err)
	}
	return first
}

// commit publishes every file in order; when one fails, the rest are
// aborted and the ones published are removed again.
func (s *fileSet) commit() error {
	for i, f := range s.files {
		if err := f.Commit(); err != nil {
			for _, g := range s.files[i+1:] {
				g.Abort(context.Background(), err)
			}
			var left []string
			for _, p := range s.paths[:i] {
				if rerr := os.Remove(p); rerr != nil {
					left = append(left, p)
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("%w (could not remove the shards already published: %s)", err, strings.Join(left, ", "))
			}
			return err
		}
	}
	return nil
}
