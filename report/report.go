package report

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"fmt"
	"html/template"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"slices"
)

// Report is everything one report shows.
type Report struct {
	// Title heads the page.
	Title string
	// Source names the reference model.
	Source string
	// SourceSize is the reference's size in bytes (0: unknown).
	SourceSize int64
	// Settings says how the images were made (steps, size, sampler), in one line.
	Settings string
	// Prompts are the prompts and seeds, each with the source's image.
	Prompts []Prompt
	// Files are the quantized files, in ladder order.
	Files []File
	// Gain is the factor the difference maps amplify by (0: DefaultGain).
	Gain float64
}

// DefaultGain amplifies differences of a few levels of 255 into visible ones.
const DefaultGain = 4

// Prompt is one fixed prompt and seed with the source's image.
type Prompt struct {
	// Text is the prompt.
	Text string
	// Seed is the seed.
	Seed uint64
	// Image is the source model's image.
	Image image.Image
}

// File is one quantized file of the ladder.
type File struct {
	// Name is the file's name, Type its --type.
	Name, Type string
	// Size is the file's size in bytes.
	Size int64
	// BitsPerWeight is from the ladder's manifest.
	BitsPerWeight float64
	// Images are the file's images, one per Prompt in order.
	Images []Shot
	// Blocks are per-block errors of the denoiser's outputs (relative
	// error ‖a−b‖/‖a‖ at the first step), in network order.
	Blocks []Bar
	// Tensors are per-tensor weight errors (relative error), any order;
	// the report shows the largest.
	Tensors []Bar
	// Error says why the file could not be rendered or measured ("" when it
	// was): its row is marked failed with it, and it has no images or charts.
	Error string
}

// Failed reports whether the file could not be rendered (Error is set).
func (f *File) Failed() bool { return f.Error != "" }

// Shot is one image of a file and how close it is to the source's.
type Shot struct {
	// Image is the file's image.
	Image image.Image
	// PSNR (dB; +Inf for identical images) and SSIM against the source's image.
	PSNR, SSIM float64
}

// Bar is one named error.
type Bar struct {
	// Name labels the bar.
	Name string
	// Value is the error.
	Value float64
}

// TopTensors is how many of a file's tensor errors the report draws.
const TopTensors = 12

// PSNR returns the mean PSNR of the file's images; +Inf when all are identical.
func (f *File) PSNR() float64 { return mean(f.Images, func(s Shot) float64 { return s.PSNR }) }

// SSIM returns the mean SSIM of the file's images.
func (f *File) SSIM() float64 { return mean(f.Images, func(s Shot) float64 { return s.SSIM }) }

func mean(s []Shot, v func(Shot) float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range s {
		sum += v(x)
	}
	return sum / float64(len(s))
}

// DiffMap returns the difference of b from a as an image: a dimmed grey
// copy of a, with the per-pixel largest channel difference, times gain,
// painted over it in red to yellow, so that where the images differ shows
// against the picture it belongs to.
func DiffMap(a, b image.Image, gain float64) (*image.RGBA, error) {
	r := a.Bounds()
	if b.Bounds().Dx() != r.Dx() || b.Bounds().Dy() != r.Dy() {
		return nil, fmt.Errorf("images of %dx%d and %dx%d", r.Dx(), r.Dy(), b.Bounds().Dx(), b.Bounds().Dy())
	}
	if gain <= 0 {
		gain = DefaultGain
	}
	out := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	ob := b.Bounds().Min
	for y := 0; y < r.Dy(); y++ {
		for x := 0; x < r.Dx(); x++ {
			ca := color.RGBAModel.Convert(a.At(r.Min.X+x, r.Min.Y+y)).(color.RGBA)
			cb := color.RGBAModel.Convert(b.At(ob.X+x, ob.Y+y)).(color.RGBA)
			d := max(absDiff(ca.R, cb.R), absDiff(ca.G, cb.G), absDiff(ca.B, cb.B))
			grey := (299*float64(ca.R) + 587*float64(ca.G) + 114*float64(ca.B)) / 1000 / 4
			v := min(255, float64(d)*gain)
			out.SetRGBA(x, y, color.RGBA{
				R: uint8(min(255, grey+v)),
				G: uint8(min(255, grey+max(0, v-128)*2)),
				B: uint8(grey * (1 - v/255)),
				A: 255,
			})
		}
	}
	return out, nil
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// dataURI encodes img as a PNG data: URI.
func dataURI(img image.Image) (template.URL, error) {
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return "", err
	}
	return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())), nil
}

// view is the report as the template sees it.
type view struct {
	Title, Source, Settings string
	SourceSize              string
	Prompts                 []promptView
	Files                   []fileView
	Chart                   template.HTML
	Gain                    float64
}

type promptView struct {
	Text  string
	Seed  uint64
	Image template.URL
	Shots []shotView
}

type shotView struct {
	File, Type string
	Image      template.URL
	Diff       template.URL
	PSNR       string
	SSIM       string
}

type fileView struct {
	Name, Type, Size, BPW, PSNR, SSIM, Error string
	Blocks, Tensors                          template.HTML
}

// Write renders r as one self-contained HTML page.
func Write(w io.Writer, r *Report) error {
	gain := r.Gain
	if gain <= 0 {
		gain = DefaultGain
	}
	v := view{Title: clean(r.Title), Source: clean(r.Source), Settings: clean(r.Settings), SourceSize: size(r.SourceSize), Gain: gain}
	for pi, p := range r.Prompts {
		src, err := dataURI(p.Image)
		if err != nil {
			return err
		}
		pv := promptView{Text: clean(p.Text), Seed: p.Seed, Image: src}
		for _, f := range r.Files {
			if f.Failed() {
				continue
			}
			if len(f.Images) != len(r.Prompts) {
				return fmt.Errorf("%s: %d images for %d prompts", f.Name, len(f.Images), len(r.Prompts))
			}
			s := f.Images[pi]
			img, err := dataURI(s.Image)
			if err != nil {
				return err
			}
			d, err := DiffMap(p.Image, s.Image, gain)
			if err != nil {
				return fmt.Errorf("%s: prompt %d: %w", f.Name, pi+1, err)
			}
			diff, err := dataURI(d)
			if err != nil {
				return err
			}
			pv.Shots = append(pv.Shots, shotView{File: clean(f.Name), Type: clean(f.Type), Image: img, Diff: diff, PSNR: db(s.PSNR), SSIM: fmt.Sprintf("%.4f", s.SSIM)})
		}
		v.Prompts = append(v.Prompts, pv)
	}
	var blockScale, tensorScale float64
	for _, f := range r.Files {
		blockScale, tensorScale = max(blockScale, largest(f.Blocks)), max(tensorScale, largest(f.Tensors))
	}
	for _, f := range r.Files {
		if f.Failed() {
			v.Files = append(v.Files, fileView{Name: clean(f.Name), Type: clean(f.Type), Size: size(f.Size), BPW: bpw(f.BitsPerWeight), Error: clean(f.Error)})
			continue
		}
		tensors := slices.Clone(f.Tensors)
		slices.SortStableFunc(tensors, func(a, b Bar) int { return cmp.Compare(b.Value, a.Value) })
		if len(tensors) > TopTensors {
			tensors = tensors[:TopTensors]
		}
		v.Files = append(v.Files, fileView{
			Name: clean(f.Name), Type: clean(f.Type), Size: size(f.Size), BPW: bpw(f.BitsPerWeight),
			PSNR: db(f.PSNR()), SSIM: fmt.Sprintf("%.4f", f.SSIM()),
			Blocks:  bars("per-block error: relative error ‖a−b‖/‖a‖ of each block's output at step 1", f.Blocks, blockScale),
			Tensors: bars(fmt.Sprintf("per-tensor error: relative error ‖a−b‖/‖a‖ of the %d worst weights", len(tensors)), tensors, tensorScale),
		})
	}
	v.Chart = chart(r.Files)
	return page.Execute(w, v)
}

// bpw formats bits per weight; "" when unknown (0).
func bpw(v float64) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

// db formats a PSNR; identical images have an infinite one.
func db(v float64) string {
	if math.IsInf(v, 1) {
		return "identical"
	}
	return fmt.Sprintf("%.2f dB", v)
}

// size formats bytes in MiB (or KiB for small files).
func size(n int64) string {
	switch {
	case n <= 0:
		return ""
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{"inc": func(i int) int { return i + 1 }}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 20px 0 8px; }
p.settings { color: #555; margin: 0 0 12px; }
table.files { border-collapse: collapse; } table.files td, table.files th { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; }
table.files td:first-child, table.files th:first-child { text-align: left; }
table.files tr.failed td { color: #b00; } table.files tr.failed td[colspan] { text-align: left; }
.row { display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-start; }
figure { margin: 0; text-align: center; font-size: 12px; }
figure img { display: block; width: 128px; height: 128px; image-rendering: pixelated; }
figcaption { max-width: 128px; }
.cards { display: flex; flex-wrap: wrap; gap: 16px; }
.card { border: 1px solid #ddd; padding: 8px; }
.card h3 { font-size: 14px; margin: 0 0 6px; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="settings">Source {{.Source}}{{with .SourceSize}} ({{.}}){{end}}. {{.Settings}} Difference maps: the source's image dimmed, the largest channel difference times {{.Gain}} in red to yellow.</p>
<table class="files">
<tr><th>file</th><th>type</th><th>size</th><th>bits/weight</th><th>PSNR</th><th>SSIM</th></tr>
{{range .Files}}<tr{{if .Error}} class="failed"{{end}}><td>{{.Name}}</td><td>{{.Type}}</td><td>{{.Size}}</td><td>{{.BPW}}</td>{{if .Error}}<td colspan="2">failed: {{.Error}}</td>{{else}}<td>{{.PSNR}}</td><td>{{.SSIM}}</td>{{end}}</tr>
{{end}}</table>
<h2>Quality against file size</h2>
<div class="chart" id="chart-quality">{{.Chart}}</div>
{{range $i, $p := .Prompts}}
<h2>Prompt {{inc $i}}: “{{$p.Text}}”, seed {{$p.Seed}}</h2>
<div class="row">
<figure><img class="shot" src="{{$p.Image}}" alt="source"><figcaption>source</figcaption></figure>
{{range $p.Shots}}<figure><img class="shot" src="{{.Image}}" alt="{{.Type}}"><img class="shot diff" src="{{.Diff}}" alt="{{.Type}} difference"><figcaption>{{.Type}}<br>{{.PSNR}}, SSIM {{.SSIM}}</figcaption></figure>
{{end}}</div>
{{end}}
<h2>Where the error is</h2>
<div class="cards">
{{range .Files}}{{if not .Error}}<div class="card"><h3>{{.Type}} ({{.Name}}, {{.Size}})</h3>
<div class="chart">{{.Blocks}}</div>
<div class="chart">{{.Tensors}}</div>
</div>{{end}}
{{end}}</div>
</body>
</html>
`
