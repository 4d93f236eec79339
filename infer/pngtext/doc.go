// Package pngtext writes and reads the text chunks of PNG files (tEXt, zTXt
// and iTXt), where image generators keep the settings an image was made
// with: Write encodes an image with text chunks right after the header,
// Read returns the text chunks of a PNG stream. Generation settings go under
// ParametersKey, as A1111, stable-diffusion.cpp and ComfyUI do.
//
// It depends only on the standard library; cmd/sdtool's generate uses it to
// label its images, with the text that infer.GenerationParams formats.
package pngtext
