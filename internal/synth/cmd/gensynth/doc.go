// Command gensynth writes synthetic checkpoints with package synth. With
// -testdata DIR it writes the committed test files into DIR:
// tiny-sd1.gguf and tiny-sd1.safetensors (one model, synth.TinySD, in both
// formats; generate runs either), its synthetic importance matrix
// tiny-sd1.imatrix.dat, tiny-sdxl.gguf (synth.TinySDXL), tiny-flux.gguf
// (synth.TinyFlux, one file with ComfyUI's prefixes), tiny-chroma.gguf
// (synth.TinyChroma, likewise), tiny-sd3.gguf (synth.TinySD3, SD3's
// checkpoint prefixes), tiny-wan.gguf (synth.TinyWan, one file with
// sd.cpp's prefixes), tiny-wan-ti2v.gguf (synth.TinyWanTI2V, likewise),
// tiny-flux2-klein.gguf (synth.TinyKlein, sd-cli's
// prefixes, the Qwen3 tokenizer embedded), tiny-flux2-dev.gguf
// (synth.TinyDev, likewise with a Mistral and a Tekken-split vocabulary) and
// the component files people
// download of Qwen-Image and Z-Image (tiny-qwen-image-*, tiny-z-image-*,
// the Qwen tokenizer embedded in the llm file). With -arch it
// writes any architecture the generator knows, scaled; with -sd a runnable
// SD preset, optionally with quantized linear weights; with -parts a full-size
// model as its component files. It never replaces an
// existing file unless -force is given, so regenerating the committed files
// is asked for explicitly:
//
//	go run ./internal/synth/cmd/gensynth -testdata testdata -force
//	go run ./internal/synth/cmd/gensynth -arch flux -scale 0.0625 -depth 2 -o flux-small.gguf
//	go run ./internal/synth/cmd/gensynth -sd sd15 [-quant q4_K] -o /tmp/sd15.gguf
//	go run ./internal/synth/cmd/gensynth -parts z-image-turbo -o /tmp/zimage  # 11 GB
package main
