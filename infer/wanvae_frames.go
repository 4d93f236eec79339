package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native"
)

// decodeWanVideo decodes a diffusion latent video [Z, frames, h, w] with a
// Wan VAE, one latent frame per chunk as sd.cpp chunks it: frame 0 alone
// gives one frame, each later one four. Each chunk runs as one graph up to
// the last time upsampling (decodeHead) and then one graph per frame
// (decodeTail), the causal convolutions' caches carrying over between all
// of them in buffers of their own: a graph holds one frame's activations
// at the full resolution. It returns the frames [n][3][H][W] and n.
func decodeWanVideo(m *Model, latent []float32, w, h, frames int) ([]float32, int, error) {
	c := &m.Config.VAE
	cfg := c.Layout.(*WanVAEConfig)
	cell := w * h
	if frames <= 0 || len(latent) != c.ZChannels*frames*cell {
		return nil, 0, fmt.Errorf("%s: %d latent values are not %d frames of %dx%dx%d", m.Path, len(latent), frames, c.ZChannels, h, w)
	}
	caches := &wanCacheSet{be: m.be}
	defer caches.free()
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
		mid, ne, tailIdx, err := wanDecodeHead(m, cfg, caches, f, z, w, h)
		if err != nil {
			return nil, 0, err
		}
		size := int(ne[0] * ne[1] * ne[2])
		for j := range int(ne[3]) {
			err := m.compute(func(g *builder) ([]input, native.Tensor) {
				r := &wanRun{g: g, cfg: cfg, chunk: f, idx: tailIdx, cache: caches}
				xt := newInput(g, formats.F32, ne[0], ne[1], ne[2], 1)
				return []input{{t: xt, f32: mid[j*size : (j+1)*size]}}, r.decodeTail(xt)
			}, func(o native.Tensor) error {
				v, err := o.F32()
				out = append(out, v...)
				n += int(o.Ne()[3])
				return err
			})
			if err != nil {
				return nil, 0, err
			}
			caches.commit()
		}
	}
	return out, n, nil
}

// wanDecodeHead runs decodeHead on the VAE latent frame z of chunk f and
// returns its output with its dims and the number of the first cache the
// tail uses.
func wanDecodeHead(m *Model, cfg *WanVAEConfig, caches *wanCacheSet, f int, z []float32, w, h int) ([]float32, [4]int64, int, error) {
	var mid []float32
	var ne [4]int64
	tailIdx := 0
	err := m.compute(func(g *builder) ([]input, native.Tensor) {
		r := &wanRun{g: g, cfg: cfg, chunk: f, cache: caches}
		zt := newInput(g, formats.F32, int64(w), int64(h), int64(cfg.ZDim), 1)
		x := r.decodeHead(zt)
		tailIdx = r.idx
		return []input{{t: zt, f32: z}}, x
	}, func(o native.Tensor) error {
		var err error
		ne = o.Ne()
		mid, err = o.F32()
		return err
	})
	if err == nil {
		caches.commit()
	}
	return mid, ne, tailIdx, err
}

// encodeWanVideo encodes pixel frames [n][3][H][W] with a Wan VAE, one
// graph per chunk as sd.cpp chunks them (frame 0 alone, then four at a
// time; n is 1 + 4k), carrying the caches like decodeWanVideo, to a
// diffusion latent video [Z, 1+k, h, w].
func encodeWanVideo(m *Model, px []float32, w, h, n int) ([]float32, int, error) {
	c := &m.Config.VAE
	cfg := c.Layout.(*WanVAEConfig)
	if !c.HasEncoder {
		return nil, 0, fmt.Errorf("%s: the model has no VAE encoder (%sencoder)", m.Path, vaePfx)
	}
	if (n-1)%wanEncodeStride != 0 {
		return nil, 0, fmt.Errorf("%s: %d frames: a Wan VAE encodes 1 + %d·k", m.Path, n, wanEncodeStride)
	}
	caches := &wanCacheSet{be: m.be}
	defer caches.free()
	frame := 3 * w * h
	var lat [][]float32
	for chunk, at := 0, 0; at < n; chunk++ {
		k := 1
		if chunk > 0 {
			k = wanEncodeStride
		}
		err := m.compute(func(g *builder) ([]input, native.Tensor) {
			r := &wanRun{g: g, cfg: cfg, chunk: chunk, cache: caches}
			xt := newInput(g, formats.F32, int64(w), int64(h), 3, int64(k))
			return []input{{t: xt, f32: px[at*frame : (at+k)*frame]}}, r.latent(r.encodeChunk(xt))
		}, func(o native.Tensor) error {
			v, err := o.F32()
			lat = append(lat, v)
			return err
		})
		if err != nil {
			return nil, 0, err
		}
		caches.commit()
		at += k
	}
	out := channelsMajor(lat, c.ZChannels)
	for i, v := range out {
		out[i] = (v - c.ShiftFactor) * c.ScaleFactor
	}
	return out, len(lat), nil
}

// wanCacheSet holds a Wan VAE's causal-conv caches between chunks, each
// in a backend buffer of its own that the graphs read and write directly:
// wanCacheFrames frames [W, H, C] per conv, the last valid of them current.
type wanCacheSet struct {
	be    *native.Backend
	slots []*wanSlot
}

// wanSlot is one conv's cache.
type wanSlot struct {
	ctx *native.Context
	buf *native.Buffer
	t   native.Tensor
	// valid is the frames the last chunk left, pending those this chunk writes.
	valid, pending int
}

// slot returns cache idx for frames of ne's size and type typ, allocating
// it on first use.
func (s *wanCacheSet) slot(idx int, ne [4]int64, typ formats.DType) *wanSlot {
	for len(s.slots) <= idx {
		s.slots = append(s.slots, nil)
	}
	if sl := s.slots[idx]; sl != nil {
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
		if buf, err = s.be.AllocContext(ctx); err == nil {
			s.slots[idx] = &wanSlot{ctx: ctx, buf: buf, t: t}
			return s.slots[idx]
		}
	}
	ctx.Free()
	panic(&native.ShapeError{Msg: fmt.Sprintf("wan vae cache %d: %v", idx, err)})
}

// commit makes the frames the last chunk wrote current.
func (s *wanCacheSet) commit() {
	for _, sl := range s.slots {
		if sl != nil && sl.pending > 0 {
			sl.valid, sl.pending = sl.pending, 0
		}
	}
}

// free releases the caches.
func (s *wanCacheSet) free() {
	for _, sl := range s.slots {
		if sl != nil {
			sl.buf.Free()
			sl.ctx.Free()
		}
	}
	s.slots = nil
}
