// Command gensynth writes synthetic checkpoints with package synth. Without
// arguments it regenerates the committed test models (run it from the
// repository root): testdata/tiny-sd1.safetensors (synth.TinySD1), its
// synthetic importance matrix testdata/tiny-sd1.imatrix.dat, and
// testdata/tiny-sd1.gguf (synth.TinySD, which generate runs). With -arch it
// writes any architecture the generator knows, scaled; with -sd a runnable
// SD preset, optionally with quantized linear weights:
//
//	go run ./internal/synth/cmd/gensynth
//	go run ./internal/synth/cmd/gensynth -arch flux -scale 0.0625 -depth 2 -o flux-small.gguf
//	go run ./internal/synth/cmd/gensynth -sd sd15 [-quant q4_K] -o /tmp/sd15.gguf
package main
