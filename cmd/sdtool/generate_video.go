package main

import (
	"fmt"
	"image"
	"image/draw"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/avi"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/infer/pngtext"
	"github.com/sdtool/sdtool/pipeline"
)

// Video in generate, as sd-cli's vid_gen mode: -M vid_gen renders
// --video-frames frames (aligned to what the video VAE packs), written as
// one Motion-JPEG .avi or, with a printf frame index in the name
// (out_%03d.png), one PNG per frame counted from 0.

// Generation modes (-M), sd-cli's names.
const (
	modeImage = "img_gen"
	modeVideo = "vid_gen"
)

// framePattern finds a printf frame index in an output name, as sd-cli's does (%d, %03d).
var framePattern = regexp.MustCompile(`%0?\d*d`)

// videoFlags are generate's video flags, as sd-cli names them.
func videoFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mode", Aliases: []string{"M"}, Value: modeImage, Usage: "`MODE`: img_gen (an image) or vid_gen (a video, from a video family such as Wan)"},
		&cli.IntFlag{Name: "video-frames", Usage: "`FRAMES` of a video (-M vid_gen), aligned down to what the video VAE packs (4k+1 for Wan)", DefaultText: "the family's: 6 (aligned to 5) for Wan"},
		&cli.IntFlag{Name: "fps", Usage: "frame rate written in a video `FILE` (.avi)", DefaultText: "the family's: 16 for Wan"},
		&cli.Float64Flag{Name: "flow-shift", Usage: "timestep `SHIFT` of a shifted flow schedule", DefaultText: "the family's: 5 for Wan"},
		&cli.IntFlag{Name: "high-noise-steps", Value: -1, Usage: "`STEPS` the high-noise expert (--high-noise-diffusion-model, Wan 2.2 A14B) runs before the model; -1: those above --moe-boundary"},
		&cli.Float64Flag{Name: "high-noise-cfg-scale", Value: 7, Usage: "the high-noise expert's classifier-free guidance `SCALE`"},
		&cli.StringFlag{Name: "high-noise-sampling-method", Usage: "the high-noise expert's `SAMPLER`", DefaultText: "the family's"},
		&cli.Float64Flag{Name: "moe-boundary", Value: 0.875, Usage: "`SIGMA` below which the model takes over from the high-noise expert (with --high-noise-steps -1)"},
	}
}

// highNoiseFlags are the flags that set the high-noise expert's steps.
var highNoiseFlags = []string{"high-noise-steps", "high-noise-cfg-scale", "high-noise-sampling-method", "moe-boundary"}

// highNoiseRequest sets req's high-noise expert settings from the flags
// (sd-cli's defaults when unset); a model without an expert refuses them.
func highNoiseRequest(c *cli.Context, m *infer.Model, req *infer.Request) error {
	set := false
	for _, f := range highNoiseFlags {
		set = set || c.IsSet(f)
	}
	if !set && c.String("high-noise-diffusion-model") == "" {
		return nil
	}
	method, err := infer.ParseMethod(c.String("high-noise-sampling-method"))
	if err != nil {
		return err
	}
	if v := c.Float64("high-noise-cfg-scale"); !(v >= 0 && v < 1000) {
		return fmt.Errorf("--high-noise-cfg-scale %g: want a value from 0 to below 1000", v)
	}
	req.HighNoise = &infer.HighNoise{Steps: c.Int("high-noise-steps"), Boundary: float32(c.Float64("moe-boundary")),
		CFGScale: float32(c.Float64("high-noise-cfg-scale")), Method: method}
	if req.HighNoise.Method == "" {
		req.HighNoise.Method = m.Family.Defaults.Method
	}
	return nil
}

// checkOutputName accepts the outputs generate writes: a .png image, a
// .avi video, or PNG frames named by a printf index (out_%03d.png).
func checkOutputName(out string) error {
	ext := strings.ToLower(filepath.Ext(out))
	switch {
	case framePattern.MatchString(out) && ext == ".png":
	case framePattern.MatchString(out):
		return fmt.Errorf("%s: frames named by an index must be .png files", out)
	case ext == ".png", ext == ".avi":
	default:
		return fmt.Errorf("%s: the output must be a .png image, a .avi video or PNG frames named like out_%%03d.png", out)
	}
	return nil
}

// videoRequest sets req's frames for -M vid_gen, the mode's checks and
// the high-noise expert's settings.
func videoRequest(c *cli.Context, m *infer.Model, req *infer.Request) error {
	if err := highNoiseRequest(c, m, req); err != nil {
		return err
	}
	vae := &m.Family.VAE
	switch mode := c.String("mode"); mode {
	case modeImage:
		if c.IsSet("video-frames") {
			return fmt.Errorf("--video-frames needs -M %s", modeVideo)
		}
		if strings.EqualFold(filepath.Ext(c.String("output")), ".avi") {
			return fmt.Errorf("%s: a .avi output needs -M %s", c.String("output"), modeVideo)
		}
		if req.Init != nil && m.Family.InitFirstFrame {
			return fmt.Errorf("--init-img with %s starts a video (image-to-video): it needs -M %s", m.Family.Title, modeVideo)
		}
		return nil
	case modeVideo:
		if vae.TimeFactor == 0 {
			return fmt.Errorf("-M %s: %s is not a video model", modeVideo, m.Family.Title)
		}
	default:
		return fmt.Errorf("-M %s: want %s or %s", mode, modeImage, modeVideo)
	}
	n := c.Int("video-frames")
	if n == 0 {
		n = m.Family.Defaults.Frames
	}
	if n < 1 || n > 1024 {
		return fmt.Errorf("--video-frames %d: want 1 to 1024", n)
	}
	if a := vae.VideoFrames(n); a != n {
		fmt.Fprintf(c.App.ErrWriter, "warning: aligning the video from %d to %d frames (%s packs the first frame and then %d per latent frame), as sd-cli does\n",
			n, a, m.Family.Title, vae.TimeFactor)
		n = a
	}
	req.Frames = n
	return nil
}

// videoOutputs names the files a video of frames frames is written to.
func videoOutputs(out string, frames int) []string {
	if !framePattern.MatchString(out) {
		return []string{out}
	}
	names := make([]string, frames)
	loc := framePattern.FindStringIndex(out)
	for i := range names {
		names[i] = out[:loc[0]] + fmt.Sprintf(out[loc[0]:loc[1]], i) + out[loc[1]:]
	}
	return names
}

// checkVideoOutputs refuses existing outputs (without --force) before the work starts.
func checkVideoOutputs(c *cli.Context, out string, frames int) error {
	for _, name := range videoOutputs(out, frames) {
		if err := pipeline.CheckOutput(name, generateInputs(c), c.Bool("force")); err != nil {
			return err
		}
	}
	return nil
}

// writeVideo writes a video result: one .avi, or one PNG per frame.
func writeVideo(c *cli.Context, m *infer.Model, req infer.Request, res *infer.Result, out string, params infer.GenerationParams) ([]image.Image, error) {
	frames, err := infer.FrameImages(res)
	if err != nil {
		return nil, err
	}
	imgs := make([]image.Image, len(frames))
	for i, f := range frames {
		imgs[i] = f
	}
	opt := pipeline.PublishOptions{Force: c.Bool("force"), Inputs: generateInputs(c), Logger: slog.Default()}
	if strings.EqualFold(filepath.Ext(out), ".avi") {
		fps := c.Int("fps")
		if fps == 0 {
			fps = max(m.Family.Defaults.FPS, 1)
		}
		return imgs, pipeline.WriteAtomic(c.Context, out, opt, func(w io.Writer) error {
			return avi.Write(w, imgs, avi.Options{FPS: fps})
		})
	}
	names := videoOutputs(out, len(frames))
	if len(names) != len(frames) {
		return nil, fmt.Errorf("%s: %d frames for one PNG: name the frames with an index (out_%%03d.png) or write a .avi", out, len(frames))
	}
	for i, name := range names {
		err := pipeline.WriteAtomic(c.Context, name, opt, func(w io.Writer) error {
			return pngtext.Write(w, frames[i], map[string]string{pngtext.ParametersKey: params.String()}, nil)
		})
		if err != nil {
			return nil, err
		}
	}
	return imgs, nil
}

// compareFrame is one video frame's comparison with the reference's.
type compareFrame struct {
	// PSNR is the frame's PSNR in dB (nil when identical) and SSIM its structural similarity.
	PSNR *float64 `json:"psnr_db"`
	SSIM float64  `json:"ssim"`
	// Change and RefChange are the mean absolute difference from the
	// previous frame (0 to 1 of the pixel range) in the model's video and
	// the reference's; 0 for the first frame.
	Change    float64 `json:"change"`
	RefChange float64 `json:"ref_change"`
}

// compareVideo fills r's image figures for a result of one or more
// frames: per frame, over the clip (PSNR of the mean squared error, mean
// SSIM) and, for a video, the temporal difference.
func compareVideo(r *compareResult, refFrames, frames []image.Image) error {
	if len(refFrames) != len(frames) {
		return fmt.Errorf("the reference has %d frames, the model %d", len(refFrames), len(frames))
	}
	var mse, ssim float64
	for i := range frames {
		p, err := metrics.PSNR(refFrames[i], frames[i])
		if err != nil {
			return err
		}
		s, err := metrics.SSIM(refFrames[i], frames[i])
		if err != nil {
			return err
		}
		mse += 255 * 255 / math.Pow(10, p/10)
		ssim += s
		f := compareFrame{SSIM: s}
		if !math.IsInf(p, 1) {
			f.PSNR = &p
		}
		if i > 0 {
			f.Change, f.RefChange = meanAbsDiff(frames[i-1], frames[i]), meanAbsDiff(refFrames[i-1], refFrames[i])
			r.Flicker = max(r.Flicker, math.Abs(f.Change-f.RefChange))
		}
		r.Frames = append(r.Frames, f)
	}
	n := float64(len(frames))
	r.SSIM = ssim / n
	r.Identical = mse == 0
	if !r.Identical {
		p := 10 * math.Log10(255*255/(mse/n))
		r.PSNR = &p
	}
	if len(frames) == 1 {
		r.Frames = nil // an image: the figures above say it all
	}
	return nil
}

// meanAbsDiff is the mean absolute difference of two images' RGB values, 0 to 1.
func meanAbsDiff(a, b image.Image) float64 {
	var s float64
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			ar, ag, ab, _ := a.At(x, y).RGBA()
			br, bg, bb, _ := b.At(x, y).RGBA()
			s += math.Abs(float64(ar)-float64(br)) + math.Abs(float64(ag)-float64(bg)) + math.Abs(float64(ab)-float64(bb))
		}
	}
	return s / (3 * 65535 * float64(r.Dx()*r.Dy()))
}

// writeFramesText prints a video comparison's frames.
func (r *compareResult) writeFramesText(w io.Writer) {
	if len(r.Frames) == 0 {
		return
	}
	fmt.Fprintf(w, "  %d frames; largest difference in frame-to-frame change (flicker) %.4f\n  %-6s %10s %8s %10s %10s\n",
		len(r.Frames), r.Flicker, "frame", "PSNR dB", "SSIM", "change", "ref change")
	for i, f := range r.Frames {
		p := math.Inf(1)
		if f.PSNR != nil {
			p = *f.PSNR
		}
		fmt.Fprintf(w, "  %-6d %10.2f %8.4f %10.4f %10.4f\n", i, p, f.SSIM, f.Change, f.RefChange)
	}
}

// framesNote says how many frames a video has, for generate's summary line.
func framesNote(req infer.Request, res *infer.Result) string {
	if req.Frames == 0 {
		return ""
	}
	return fmt.Sprintf(", %d frames", res.Frames)
}

// videoOutputNote names what an output pattern became ("cat_000.png ... cat_004.png").
func videoOutputNote(out string, frames int) string {
	names := videoOutputs(out, max(frames, 1))
	if len(names) == 1 {
		return names[0]
	}
	return names[0] + " ... " + names[len(names)-1]
}

// filmstrip lays a result's frames side by side in one image (an image
// result is itself), so that a report shows a clip as it shows an image
// and measures it over all its frames.
func filmstrip(res *infer.Result) (image.Image, error) {
	frames, err := infer.FrameImages(res)
	if err != nil {
		return nil, err
	}
	if len(frames) == 1 {
		return frames[0], nil
	}
	w, h := res.Width, res.Height
	out := image.NewRGBA(image.Rect(0, 0, w*len(frames), h))
	for i, f := range frames {
		draw.Draw(out, image.Rect(i*w, 0, (i+1)*w, h), f, image.Point{}, draw.Src)
	}
	return out, nil
}
