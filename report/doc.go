// Package report renders the visual report of a quantized ladder as one
// self-contained HTML file: the images of fixed prompts and seeds made
// with the source and with every file side by side, an amplified
// difference map under each, PSNR and SSIM per file, a chart of quality
// against file size, and per-block and per-tensor error bars. Images are
// PNG data: URIs and charts inline SVG, so the file needs no other file,
// no network and no JavaScript to be read.
//
// The package only renders (html/template, image/png); `sdtool report`
// (cmd/sdtool) runs the models through infer and measures the errors.
//
// On the map (docs/design.md) report stands beside the commands' packages and
// imports none of sdtool's.
package report
