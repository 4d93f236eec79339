package wan

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// decodeWanVideo decodes a diffusion latent video [Z, frames, h, w] with a
// Wan VAE, one latent frame per chunk as sd.cpp chunks it: frame 0 alone
// gives one frame, each later one four. Each chunk runs as one graph up to
// the last time upsampling (decodeHead) and then one graph per frame
// (decodeTail), the causal convolutions' caches carrying over between all
// of them in buffers of their own: a graph holds one frame's activations
// at the full resolution. It returns the frames [n][3][H][W] and n.
func decodeWanVideo(m *infer.Model, latent []float32, w, h, frames int) ([]float32, int, error) {
	c := &m.Config.VAE
	cfg := c.Layout.(*WanVAEConfig)
	cell := w * h
	if frames <= 0 || len(latent) != c.ZChannels*frames*cell {
		return nil, 0, fmt.Errorf("%s: %d latent values are not %d frames of %dx%dx%d", m.Path, len(latent), frames, c.ZChannels, h, w)
	}
	caches := &WanCacheSet{Backend: m.Backend}
	defer caches.Free()
	var out []float32
	n := 0
	z := make([]float32, c.ZChannels*cell)
	for f := range frames {
		for ch := range c.ZChannels {
			src := latent[(ch*frames+f)*cell : (ch*frames+f+1)*cell]
			for i, v := range src {
				z[ch*cell+i] = v/c.ScaleFactor + c.ShiftFactor
			}
		}
		last := f == frames-1 // the caches it writes would go unread
		mid, ne, tailIdx, err := wanDecodeHead(m, cfg, caches, f, z, w, h, !last)
		if err != nil {
			return nil, 0, err
		}
		size := int(ne[0] * ne[1] * ne[2])
		for j := range int(ne[3]) {
			keep := !last || j < int(ne[3])-1
			err := m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
				r := &WanRun{G: g, Cfg: cfg, Chunk: f, Idx: tailIdx, Cache: caches, Keep: keep}
				xt := infer.NewInput(g, formats.F32, ne[0], ne[1], ne[2], 1)
				return []infer.Input{{T: xt, F32: mid[j*size : (j+1)*size]}}, r.DecodeTail(xt)
			}, func(o native.Tensor) error {
				v, err := o.F32()
				out = append(out, v...)
				n += int(o.Ne()[3])
				return err
			})
			if err != nil {
				return nil, 0, err
			}
			caches.Commit()
		}
	}
	return out, n, nil
}

// wanDecodeHead runs decodeHead on the VAE latent frame z of chunk f
// (keep: writing its caches for the next chunk) and returns its output
// with its dims and the number of the first cache the tail uses.
func wanDecodeHead(m *infer.Model, cfg *WanVAEConfig, caches *WanCacheSet, f int, z []float32, w, h int, keep bool) ([]float32, [4]int64, int, error) {
	var mid []float32
	var ne [4]int64
	tailIdx := 0
	err := m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
		r := &WanRun{G: g, Cfg: cfg, Chunk: f, Cache: caches, Keep: keep}
		zt := infer.NewInput(g, formats.F32, int64(w), int64(h), int64(cfg.ZDim), 1)
		x := r.DecodeHead(zt)
		tailIdx = r.Idx
		return []infer.Input{{T: zt, F32: z}}, x
	}, func(o native.Tensor) error {
		var err error
		ne = o.Ne()
		mid, err = o.F32()
		return err
	})
	if err == nil {
		caches.Commit()
	}
	return mid, ne, tailIdx, err
}

// encodeWanVideo encodes pixel frames [n][3][H][W] with a Wan VAE, one
// graph per chunk as sd.cpp chunks them (frame 0 alone, then four at a
// time; n is 1 + 4k), carrying the caches like decodeWanVideo, to a
// diffusion latent video [Z, 1+k, h, w].
func encodeWanVideo(m *infer.Model, px []float32, w, h, n int) ([]float32, int, error) {
	c := &m.Config.VAE
	cfg := c.Layout.(*WanVAEConfig)
	if !c.HasEncoder {
		return nil, 0, fmt.Errorf("%s: the model has no VAE encoder (%sencoder)", m.Path, infer.VAEPfx)
	}
	if (n-1)%wanEncodeStride != 0 {
		return nil, 0, fmt.Errorf("%s: %d frames: a Wan VAE encodes 1 + %d·k", m.Path, n, wanEncodeStride)
	}
	caches := &WanCacheSet{Backend: m.Backend}
	defer caches.Free()
	frame := 3 * w * h
	var lat [][]float32
	for chunk, at := 0, 0; at < n; chunk++ {
		k := 1
		if chunk > 0 {
			k = wanEncodeStride
		}
		err := m.Compute(func(g *infer.Builder) ([]infer.Input, native.Tensor) {
			r := &WanRun{G: g, Cfg: cfg, Chunk: chunk, Cache: caches, Keep: at+k < n}
			xt := infer.NewInput(g, formats.F32, int64(w), int64(h), 3, int64(k))
			return []infer.Input{{T: xt, F32: px[at*frame : (at+k)*frame]}}, r.latent(r.encodeChunk(xt))
		}, func(o native.Tensor) error {
			v, err := o.F32()
			lat = append(lat, v)
			return err
		})
		if err != nil {
			return nil, 0, err
		}
		caches.Commit()
		at += k
	}
	out := infer.ChannelsMajor(lat, c.ZChannels)
	for i, v := range out {
		out[i] = (v - c.ShiftFactor) * c.ScaleFactor
	}
	return out, len(lat), nil
}

// WanCacheSet holds a Wan VAE's causal-conv caches between chunks, each
// in a backend buffer of its own that the graphs read and write directly:
// wanCacheFrames frames [W, H, C] per conv, the last valid of them current.
type WanCacheSet struct {
	Backend *native.Backend
	Slots   []*wanSlot
}

// wanSlot is one conv's cache.
type wanSlot struct {
	ctx *native.Context
	Buf *native.Buffer
	t   native.Tensor
	// valid is the frames the last chunk left, pending those this chunk writes.
	valid, pending int
}

// slot returns cache idx for frames of ne's size and type typ, allocating
// it on first use.
func (s *WanCacheSet) slot(idx int, ne [4]int64, typ formats.DType) *wanSlot {
	for len(s.Slots) <= idx {
		s.Slots = append(s.Slots, nil)
	}
	if sl := s.Slots[idx]; sl != nil {
		if have := sl.t.Ne(); have[0] != ne[0] || have[1] != ne[1] || have[2] != ne[2] || sl.t.Type() != typ {
			panic(&native.ShapeError{Msg: fmt.Sprintf("wan vae cache %d: %v %s, then %v %s", idx, have, sl.t.Type(), ne, typ)})
		}
		return sl
	}
	ctx, err := native.NewContext(1, 0)
	if err != nil {
		panic(&native.ShapeError{Msg: err.Error()})
	}
	t, err := ctx.NewTensor(typ, ne[0], ne[1], ne[2], wanCacheFrames)
	if err == nil {
		var buf *native.Buffer
		if buf, err = s.Backend.AllocContext(ctx); err == nil {
			s.Slots[idx] = &wanSlot{ctx: ctx, Buf: buf, t: t}
			return s.Slots[idx]
		}
	}
	ctx.Free()
	panic(&native.ShapeError{Msg: fmt.Sprintf("wan vae cache %d: %v", idx, err)})
}

// Commit makes the frames the last chunk wrote current.
func (s *WanCacheSet) Commit() {
	for _, sl := range s.Slots {
		if sl != nil && sl.pending > 0 {
			sl.valid, sl.pending = sl.pending, 0
		}
	}
}

// Free releases the caches.
func (s *WanCacheSet) Free() {
	for _, sl := range s.Slots {
		if sl != nil {
			sl.Buf.Free()
			sl.ctx.Free()
		}
	}
	s.Slots = nil
}
