package infer

import "fmt"

// Image-to-video as sd-cli runs it for a video network without image
// conditioning of its own (Family.InitFirstFrame): the init image,
// encoded as a one-frame video, is latent frame 0 of an otherwise zero
// init latent; before each network call and after it that frame is set
// back to the init latent (sd-cli's denoise mask of 0 there, 1 elsewhere),
// and the network sees a timestep of 0 for it.

// checkVideoInit refuses an init image that the model cannot start a video from.
func (m *Model) checkVideoInit(req *Request) error {
	fam := m.Family
	switch {
	case req.Init == nil || fam.VAE.TimeFactor == 0:
		return nil
	case !fam.InitFirstFrame:
		return fmt.Errorf("%s: an init image with this video model (image-to-video) is not supported: it generates from text only", fam.Title)
	case req.Frames == 0:
		return fmt.Errorf("%s: an init image starts a video (image-to-video): ask for frames", fam.Title)
	}
	return nil
}

// firstFrameLatent is the init latent [C, lf, lh, lw] of image-to-video:
// the init image's latent in frame 0, zeros after it.
func (m *Model) firstFrameLatent(req *Request, lw, lh, lf int) ([]float32, error) {
	if len(req.Init) != 3*req.Width*req.Height {
		return nil, fmt.Errorf("init image has %d values, want %d", len(req.Init), 3*req.Width*req.Height)
	}
	z, frames, err := m.EncodeVideo(req.Init, req.Width, req.Height, 1)
	if err != nil {
		return nil, err
	}
	c := m.Net.Channels()
	cell := lw * lh
	if frames != 1 || len(z) != c*cell {
		return nil, fmt.Errorf("%s: the init image encodes to %d values in %d frames, want %d channels of %dx%d", m.Path, len(z), frames, c, lw, lh)
	}
	out := make([]float32, c*lf*cell)
	for ch := range c {
		copy(out[ch*lf*cell:(ch*lf+1)*cell], z[ch*cell:(ch+1)*cell])
	}
	return out, nil
}

// hold sets the held leading frames of x [C, frames, h, w] to the init latent's.
func (d *guidedDenoiser) hold(x []float32) {
	cell := d.w * d.h
	f := max(d.frames, 1)
	for ch := range len(x) / (f * cell) {
		o := ch * f * cell
		copy(x[o:o+d.held*cell], d.init[o:o+d.held*cell])
	}
}

// frameT is each latent frame's timestep: 0 for a held frame, t for the
// others (sd-cli's rule: a frame whose denoise mask is 0 gets 0).
func (d *guidedDenoiser) frameT(t float32) []float32 {
	if d.frameTs == nil {
		d.frameTs = make([]float32, max(d.frames, 1))
	}
	for i := d.held; i < len(d.frameTs); i++ {
		d.frameTs[i] = t
	}
	return d.frameTs
}
