package wan

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// The Wan VAE's graph on ggml. A video is [W, H, C, T] (frames as ggml's
// batch dim, so 2-D convolutions run over every frame); a Conv3d kernel
// [out, in, kt, kh, kw] is held folded as [kw, kh, kt, in·out] and applied
// as one 2-D convolution per time tap and frame, which bounds the unfolded
// input (im2col) to one frame. The decoder runs one latent frame per
// chunk and the encoder one frame, then four per chunk, as sd.cpp runs
// them; each causal convolution keeps the last two frames of its input
// for the next chunk (a cache, in a backend buffer of its own that the
// next chunk's graph reads), so that chunked results equal a causal
// convolution over the whole video.

// WanRun builds one chunk of a Wan VAE graph.
type WanRun struct {
	G     *infer.Builder
	Cfg   *WanVAEConfig
	Chunk int
	// Idx numbers the caches in the order sd.cpp numbers them; cache
	// holds them between chunks (nil: a single chunk, no caches), and
	// keep has this graph write them for a later one.
	Idx   int
	Cache *WanCacheSet
	Keep  bool
}

// ResampleMode is what a Resample block does between levels.
type ResampleMode int

const (
	Up2d ResampleMode = iota
	Up3d
	Down2d
	Down3d
)

// input makes a graph input holding data, dims ne.
func (r *WanRun) input(data []float32, ne ...int64) native.Tensor {
	return r.G.Constant(data, ne...)
}

// cacheIn returns cache idx as F32 frames (invalid: none yet).
func (r *WanRun) cacheIn(idx int) native.Tensor {
	if r.Cache == nil || idx >= len(r.Cache.Slots) || r.Cache.Slots[idx] == nil || r.Cache.Slots[idx].valid == 0 {
		return native.Tensor{}
	}
	sl := r.Cache.Slots[idx]
	return r.G.Ctx.Cast(r.frames(sl.t, wanCacheFrames-int64(sl.valid), wanCacheFrames), formats.F32)
}

// setCache writes t, the last frames of the input of the conv whose output
// is after (invalid: none reads the old cache), into cache idx, held in
// F16: the conv unfolds its input to its F16 kernel's type anyway. The
// write is ordered after the conv, which reads the old values.
func (r *WanRun) setCache(idx int, t, after native.Tensor) {
	if r.Cache == nil || !r.Keep {
		return
	}
	ne := t.Ne()
	sl := r.Cache.slot(idx, ne, formats.F16)
	if after.Valid() {
		r.G.Expand = append(r.G.Expand, after)
	}
	r.G.Expand = append(r.G.Expand, r.G.Ctx.Copy(t, r.frames(sl.t, wanCacheFrames-ne[3], wanCacheFrames)))
	sl.pending = int(ne[3])
}

// frames returns frames [from, to) of x [W, H, C, T].
func (r *WanRun) frames(x native.Tensor, from, to int64) native.Tensor {
	ne, nb := x.Ne(), x.Nb()
	if from == 0 && to == ne[3] {
		return x
	}
	return r.G.Ctx.View(x, [4]int64{ne[0], ne[1], ne[2], to - from}, nb[1], nb[2], nb[3], from*nb[3])
}

// history is the cache a causal conv leaves after input x, given the one
// it got: the last two frames of x, with the last frame of hist in front
// when x has only one.
func (r *WanRun) history(x, hist native.Tensor) native.Tensor {
	t := x.Ne()[3]
	last := r.frames(x, max(t-wanCacheFrames, 0), t)
	if t < wanCacheFrames && hist.Valid() {
		h := hist.Ne()[3]
		last = r.G.Ctx.Concat(r.frames(hist, h-1, h), last, 3)
	}
	return last
}

// CausalConv applies the causal Conv3d prefix with its cache.
func (r *WanRun) CausalConv(x native.Tensor, prefix string) native.Tensor {
	idx := r.Idx
	r.Idx++
	hist := r.cacheIn(idx)
	k := r.G.Weight(prefix + ".weight")
	y := r.conv3d(x, hist, prefix, 1, int(k.Ne()[2])-1)
	r.setCache(idx, r.history(x, hist), y)
	return y
}

// taps returns the kernel prefix.weight's time taps as 2-D kernels [kw,
// kh, cin, cout] in F16, the type sd.cpp holds a Conv3d kernel in
// whatever the file's.
func (r *WanRun) taps(prefix string, cin int64) []native.Tensor {
	c := r.G.Ctx
	w := r.G.Weight(prefix + ".weight")
	ne, nb := w.Ne(), w.Nb()
	if cin <= 0 || ne[3]%cin != 0 {
		panic(&native.ShapeError{Msg: fmt.Sprintf("%s.weight: kernel %v on %d input channels", prefix, ne, cin)})
	}
	out := make([]native.Tensor, ne[2])
	for k := range out {
		out[k] = c.Cast(c.View(w, [4]int64{ne[0], ne[1], cin, ne[3] / cin}, nb[1], nb[3], nb[3]*cin, int64(k)*nb[2]), formats.F16)
	}
	return out
}

// conv3d applies the Conv3d prefix (spatial padding kernel/2) to x [W, H,
// C, T] in time after pad frames of history: those of hist (its last
// ones) and zeros before them. Each output frame sums one 2-D conv per tap.
func (r *WanRun) conv3d(x, hist native.Tensor, prefix string, stride, pad int) native.Tensor {
	c := r.G.Ctx
	taps := r.taps(prefix, x.Ne()[2])
	kt := len(taps)
	sp := int(taps[0].Ne()[0] / 2)
	var h int64
	if hist.Valid() && pad > 0 {
		h = min(hist.Ne()[3], int64(pad))
		hist = r.frames(hist, hist.Ne()[3]-h, hist.Ne()[3])
	}
	zeros := int64(pad) - h
	n := zeros + h + x.Ne()[3]
	var out native.Tensor
	for j := int64(0); (j*int64(stride))+int64(kt) <= n; j++ {
		var acc native.Tensor
		for k := range kt {
			p := j*int64(stride) + int64(k) - zeros
			if p < 0 {
				continue // a zero frame before the video
			}
			var f native.Tensor
			if p < h {
				f = r.frames(hist, p, p+1)
			} else {
				f = r.frames(x, p-h, p-h+1)
			}
			y := c.Conv2D(taps[k], f, 1, sp)
			if acc.Valid() {
				y = c.Add(acc, y)
			}
			acc = y
		}
		if out.Valid() {
			acc = c.Concat(out, acc, 3)
		}
		out = acc
	}
	if r.G.Has(prefix + ".bias") {
		b := r.G.Weight(prefix + ".bias")
		out = c.Add(out, c.Reshape(b, 1, 1, b.Ne()[0], 1))
	}
	return out
}

// conv2dFrames applies the 2-D conv prefix to each frame of x alone (one
// frame's unfolded input at a time) with the given stride and padding.
func (r *WanRun) conv2dFrames(x native.Tensor, prefix string, stride, pad int) native.Tensor {
	var out native.Tensor
	for f := int64(0); f < x.Ne()[3]; f++ {
		y := r.G.ConvPad(r.frames(x, f, f+1), prefix, stride, pad)
		if out.Valid() {
			y = r.G.Ctx.Concat(out, y, 3)
		}
		out = y
	}
	return out
}

// rmsNorm normalizes each position's channels by their root mean square
// and scales them by prefix.gamma (Wan's RMS_norm).
func (r *WanRun) rmsNorm(x native.Tensor, prefix string) native.Tensor {
	c := r.G.Ctx
	gamma := r.G.Weight(prefix + ".gamma")
	y := c.RMSNorm(c.Cont(c.Permute(x, 1, 2, 0, 3)), WanRMSEps) // [C, W, H, T]
	y = c.Mul(y, c.Reshape(gamma, gamma.Elements(), 1, 1, 1))
	return c.Cont(c.Permute(y, 2, 0, 1, 3))
}

// ResBlock is the ResidualBlock: two RMS norm, SiLU and causal conv
// steps, and a 1x1x1 conv shortcut when the width changes.
func (r *WanRun) ResBlock(x native.Tensor, p string) native.Tensor {
	c := r.G.Ctx
	h := x
	if r.G.Has(p + "shortcut.weight") {
		h = r.conv3d(x, native.Tensor{}, p+"shortcut", 1, 0)
	}
	y := r.CausalConv(c.SiLU(r.rmsNorm(x, p+"residual.0")), p+"residual.2")
	y = r.CausalConv(c.SiLU(r.rmsNorm(y, p+"residual.3")), p+"residual.6")
	return c.Add(y, h)
}

// Attn is the middle AttentionBlock: one head over each frame's positions.
func (r *WanRun) Attn(x native.Tensor, p string) native.Tensor {
	c := r.G.Ctx
	ne := x.Ne()
	qkv := r.G.Conv2d(r.rmsNorm(x, p+"norm"), p+"to_qkv", 1) // [W, H, 3C, T]
	nb := qkv.Nb()
	part := func(i int64) native.Tensor {
		return infer.ToTokens(c, c.View(qkv, ne, nb[1], nb[2], nb[3], i*ne[2]*nb[2]))
	}
	a := infer.FromTokens(c, infer.Attention(c, part(0), part(1), part(2), 1, false), ne[0], ne[1])
	return c.Add(r.G.Conv2d(a, p+"proj", 1), x)
}

// resample is the Resample block prefix between levels: time then space
// for upsampling (a time conv doubling frames after the first chunk, then
// nearest 2x and a conv), space then time for downsampling.
func (r *WanRun) resample(x native.Tensor, p string, mode ResampleMode) native.Tensor {
	c := r.G.Ctx
	if mode == Up3d {
		idx := r.Idx
		r.Idx++
		if r.Chunk > 0 {
			// The first chunk's frame passes; later ones go through a
			// causal conv whose history starts at chunk 1.
			hist := r.cacheIn(idx)
			y := r.conv3d(x, hist, p+"time_conv", 1, 2)
			r.setCache(idx, r.history(x, hist), y)
			x = y
			ne := x.Ne()
			// Channels [k·C, (k+1)·C) are frame 2t+k: the same memory.
			x = c.Reshape(x, ne[0], ne[1], ne[2]/2, 2*ne[3])
		}
	}
	switch mode {
	case Up2d, Up3d:
		x = r.conv2dFrames(c.UpscaleNearest(x, 2), p+"resample.1", 1, 1)
	default:
		x = r.conv2dFrames(c.PadEnd(x, 1, 1), p+"resample.1", 2, 0)
	}
	if mode == Down3d {
		idx := r.Idx
		r.Idx++
		hist := r.cacheIn(idx)
		t := x.Ne()[3]
		if !hist.Valid() {
			r.setCache(idx, x, native.Tensor{})
		} else {
			y := r.conv3d(x, hist, p+"time_conv", 2, 1)
			r.setCache(idx, r.frames(x, t-1, t), y)
			x = y
		}
	}
	return x
}

// decode builds the decoder for one chunk: VAE-normalised diffusion
// latents z [w, h, Z, T] (mapped per channel here) to pixels [W, H, 3, F].
func (r *WanRun) decode(z native.Tensor) native.Tensor {
	return r.DecodeTail(r.DecodeHead(z))
}

// wanSplitLevel is the last decoder level that upsamples in time: after it
// each frame's path depends on its own input and the caches only, so the
// rest can run one frame at a time (decodeTail).
const wanSplitLevel = 1

// DecodeHead builds the decoder up to and including level wanSplitLevel.
func (r *WanRun) DecodeHead(z native.Tensor) native.Tensor {
	c := r.G.Ctx
	mean, std := r.Cfg.LatentStats()
	zc := int64(len(mean))
	z = c.Add(c.Mul(z, r.input(std, 1, 1, zc, 1)), r.input(mean, 1, 1, zc, 1))
	p := infer.VAEPfx + "decoder."
	x := r.conv3d(z, native.Tensor{}, infer.VAEPfx+"conv2", 1, 0)
	x = r.CausalConv(x, p+"conv1")
	x = r.ResBlock(x, p+"middle.0.")
	x = r.Attn(x, p+"middle.1.")
	x = r.ResBlock(x, p+"middle.2.")
	for i := 0; i <= wanSplitLevel; i++ {
		x = r.upLevel(x, i)
	}
	return x
}

// DecodeTail builds the rest of the decoder: the levels after
// wanSplitLevel and the head, then the pixels out of 2.2's patches.
func (r *WanRun) DecodeTail(x native.Tensor) native.Tensor {
	for i := wanSplitLevel + 1; i < len(WanDimMult); i++ {
		x = r.upLevel(x, i)
	}
	p := infer.VAEPfx + "decoder."
	x = r.CausalConv(r.G.Ctx.SiLU(r.rmsNorm(x, p+"head.0")), p+"head.2")
	return r.unpatchify(x)
}

// upLevel is decoder level i: its residual blocks and (but the last) its
// upsampling; 2.1 numbers the blocks of all levels in one list, four per
// level, 2.2 nests them per level.
func (r *WanRun) upLevel(x native.Tensor, i int) native.Tensor {
	p := infer.VAEPfx + "decoder."
	last := i == len(WanDimMult)-1
	mode := Up2d
	if !last && WanTempUp[i] {
		mode = Up3d
	}
	if r.Cfg.V22 {
		return r.upBlock(x, fmt.Sprintf("%supsamples.%d.", p, i), mode, last)
	}
	idx := i * (WanResBlocks + 2)
	for j := range WanResBlocks + 1 {
		x = r.ResBlock(x, fmt.Sprintf("%supsamples.%d.", p, idx+j))
	}
	if !last {
		x = r.resample(x, fmt.Sprintf("%supsamples.%d.", p, idx+WanResBlocks+1), mode)
	}
	return x
}

// upBlock is Wan 2.2's Up_ResidualBlock: residual blocks and the
// resample, plus the input duplicated to the new shape (DupUp3D).
func (r *WanRun) upBlock(x native.Tensor, p string, mode ResampleMode, last bool) native.Tensor {
	in := x
	for j := range WanResBlocks + 1 {
		x = r.ResBlock(x, fmt.Sprintf("%supsamples.%d.", p, j))
	}
	if last {
		return x
	}
	x = r.resample(x, fmt.Sprintf("%supsamples.%d.", p, WanResBlocks+1), mode)
	ft := int64(1)
	if mode == Up3d {
		ft = 2
	}
	return r.G.Ctx.Add(x, r.dupUp(in, x.Ne()[2], ft))
}

// dupUp is DupUp3D: each channel of x [W, H, C, T] repeated to out·4·ft
// channels, which unfold into 2x2 pixels and ft frames of out channels;
// the first chunk keeps only its last frame.
func (r *WanRun) dupUp(x native.Tensor, out, ft int64) native.Tensor {
	c := r.G.Ctx
	ne := x.Ne()
	w, h, ch, t := ne[0], ne[1], ne[2], ne[3]
	rep := out * ft * 4 / ch
	if rep <= 0 || rep*ch != out*ft*4 {
		panic(&native.ShapeError{Msg: fmt.Sprintf("dup_up: %d channels to %d·%d·4", ch, out, ft)})
	}
	// repeat_interleave: channel c·rep+i is channel c.
	col := c.Reshape(x, w*h, 1, ch, t)
	y := col
	for i := int64(1); i < rep; i++ {
		y = c.Concat(y, col, 1)
	}
	// Memory (t, o, a, b, d, h, w) -> (t, a, o, h, b, w, d): frame t·ft+a,
	// row h·2+b, column w·2+d.
	y = c.Cont(c.Permute(c.Reshape(y, w*h, 2, 2*ft*out, t), 1, 0, 2, 3)) // (t, o, a, b, h, w, d)
	y = c.Cont(c.Permute(c.Reshape(y, 2*w, h, 2, ft*out*t), 0, 2, 1, 3)) // (t, o, a, h, b, w, d)
	y = c.Cont(c.Permute(c.Reshape(y, 4*w*h, ft, out, t), 0, 2, 1, 3))   // (t, a, o, h, b, w, d)
	y = c.Reshape(y, 2*w, 2*h, out, ft*t)
	if r.Chunk == 0 && ft > 1 {
		y = c.Cont(r.frames(y, ft-1, ft*t))
	}
	return y
}

// unpatchify turns 2.2's patch channels (c, r, q) of x [w, h, C·4, T]
// into pixels [2w, 2h, C, T] (row h·2+q, column w·2+r).
func (r *WanRun) unpatchify(x native.Tensor) native.Tensor {
	if r.Cfg.Patch == 1 {
		return x
	}
	c := r.G.Ctx
	ne := x.Ne()
	w, h, ct := ne[0], ne[1], ne[2]/4*ne[3]
	y := c.Cont(c.Permute(c.Reshape(x, w*h, 2, 2, ct), 1, 2, 0, 3)) // (ct, q, h, w, r)
	y = c.Cont(c.Permute(c.Reshape(y, 2*w, h, 2, ct), 0, 2, 1, 3))  // (ct, h, q, w, r)
	return c.Reshape(y, 2*w, 2*h, ne[2]/4, ne[3])
}

// encodeChunk builds the encoder for one chunk: pixels [W, H, 3, T] in
// [-1, 1] (T = 1 for chunk 0, then 4) to moments [w, h, 2Z, T'] before
// the final 1x1x1 conv.
func (r *WanRun) encodeChunk(x native.Tensor) native.Tensor {
	c := r.G.Ctx
	p := infer.VAEPfx + "encoder."
	x = r.CausalConv(r.patchify(x), p+"conv1")
	idx := 0
	for i := range WanDimMult {
		last := i == len(WanDimMult)-1
		mode := Down2d
		if !last && WanTempDown[i] {
			mode = Down3d
		}
		if r.Cfg.V22 {
			x = r.downBlock(x, fmt.Sprintf("%sdownsamples.%d.", p, i), mode, last)
			continue
		}
		for range WanResBlocks {
			x = r.ResBlock(x, fmt.Sprintf("%sdownsamples.%d.", p, idx))
			idx++
		}
		if !last {
			x = r.resample(x, fmt.Sprintf("%sdownsamples.%d.", p, idx), mode)
			idx++
		}
	}
	x = r.ResBlock(x, p+"middle.0.")
	x = r.Attn(x, p+"middle.1.")
	x = r.ResBlock(x, p+"middle.2.")
	return r.CausalConv(c.SiLU(r.rmsNorm(x, p+"head.0")), p+"head.2")
}

// latent finishes an encoding: the 1x1x1 conv over the chunks' moments
// [w, h, 2Z, T], the mean (the first Z channels), normalised per channel
// to a diffusion latent [w, h, Z, T].
func (r *WanRun) latent(moments native.Tensor) native.Tensor {
	c := r.G.Ctx
	x := r.conv3d(moments, native.Tensor{}, infer.VAEPfx+"conv1", 1, 0)
	ne, nb := x.Ne(), x.Nb()
	mu := c.View(x, [4]int64{ne[0], ne[1], ne[2] / 2, ne[3]}, nb[1], nb[2], nb[3], 0)
	mean, std := r.Cfg.LatentStats()
	inv := make([]float32, len(std))
	neg := make([]float32, len(std))
	for i := range std {
		inv[i], neg[i] = 1/std[i], -mean[i]
	}
	zc := int64(len(std))
	return c.Mul(c.Add(c.Cont(mu), r.input(neg, 1, 1, zc, 1)), r.input(inv, 1, 1, zc, 1))
}

// Encode builds the whole encoder for one frame [W, H, 3, 1].
func (r *WanRun) Encode(x native.Tensor) native.Tensor {
	return r.latent(r.encodeChunk(x))
}

// downBlock is Wan 2.2's Down_ResidualBlock: residual blocks and the
// resample, plus the input averaged to the new shape (AvgDown3D).
func (r *WanRun) downBlock(x native.Tensor, p string, mode ResampleMode, last bool) native.Tensor {
	in := x
	for j := range WanResBlocks {
		x = r.ResBlock(x, fmt.Sprintf("%sdownsamples.%d.", p, j))
	}
	ft, fs := int64(1), int64(1)
	if !last {
		x = r.resample(x, fmt.Sprintf("%sdownsamples.%d.", p, WanResBlocks), mode)
		fs = 2
		if mode == Down3d {
			ft = 2
		}
	}
	return r.G.Ctx.Add(x, r.avgDown(in, x.Ne()[2], ft, fs))
}

// avgDown is AvgDown3D: x [W, H, C, T] (zero frames in front up to a
// multiple of ft) folded into C·ft·fs² channels (c, a, b, d) for frame
// t·ft+a, row h·fs+b, column w·fs+d, and averaged in groups to out channels.
func (r *WanRun) avgDown(x native.Tensor, out, ft, fs int64) native.Tensor {
	c := r.G.Ctx
	if pad := (ft - x.Ne()[3]%ft) % ft; pad > 0 {
		zero := c.Scale(r.frames(x, 0, pad), 0)
		x = c.Concat(zero, x, 3)
	}
	ne := x.Ne()
	w, h, ch, t := ne[0]/fs, ne[1]/fs, ne[2], ne[3]/ft
	group := ch * ft * fs * fs / out
	if group <= 0 || group*out != ch*ft*fs*fs || w*fs != ne[0] || h*fs != ne[1] {
		panic(&native.ShapeError{Msg: fmt.Sprintf("avg_down: %v to %d channels by %d, %d", ne, out, ft, fs)})
	}
	// Memory (t, a, c, h, b, w, d) -> (t, c, a, b, d, h, w).
	y := c.Cont(c.Permute(c.Reshape(x, w*h*fs*fs, ch, ft, t), 0, 2, 1, 3)) // (t, c, a, h, b, w, d)
	y = c.Cont(c.Permute(c.Reshape(y, w*fs, fs, h, ch*ft*t), 0, 2, 1, 3))  // (t, c, a, b, h, w, d)
	y = c.Cont(c.Permute(c.Reshape(y, fs, w*h, fs*ft*ch, t), 1, 0, 2, 3))  // (t, c, a, b, d, h, w)
	y = c.Reshape(y, w*h, group, out, t)
	nb := y.Nb()
	var sum native.Tensor
	for g := range group {
		v := c.Cont(c.View(y, [4]int64{w * h, 1, out, t}, nb[1], nb[2], nb[3], g*nb[1]))
		if sum.Valid() {
			v = c.Add(sum, v)
		}
		sum = v
	}
	return c.Reshape(c.Scale(sum, 1/float32(group)), w, h, out, t)
}

// patchify folds 2.2's 2x2 pixel patches of x [2w, 2h, C, T] into
// channels (c, r, q) of [w, h, C·4, T] (the inverse of unpatchify).
func (r *WanRun) patchify(x native.Tensor) native.Tensor {
	if r.Cfg.Patch == 1 {
		return x
	}
	c := r.G.Ctx
	ne := x.Ne()
	w, h, ct := ne[0]/2, ne[1]/2, ne[2]*ne[3]
	y := c.Cont(c.Permute(c.Reshape(x, 2*w, 2, h, ct), 0, 2, 1, 3)) // (ct, q, h, w, r)
	y = c.Cont(c.Permute(c.Reshape(y, 2, w*h, 2, ct), 2, 0, 1, 3))  // (ct, r, q, h, w)
	return c.Reshape(y, w, h, ne[2]*4, ne[3])
}
