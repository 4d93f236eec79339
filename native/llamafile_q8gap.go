//go:build cgo

package native

/*
int ggml_cpu_has_llamafile(void);
*/
import "C"

// LinkedLlamafile reports whether the linked ggml routes matrix products
// through llamafile's tinyBLAS (compiled in unless CGO_CFLAGS and
// CGO_CXXFLAGS carry -UGGML_USE_LLAMAFILE, as `go run ./build` sets).
// stable-diffusion.cpp's ggml has it off, and its sums differ in the last
// bits, so tests that hold a quantized file to sd-cli's image need it off.
func LinkedLlamafile() bool { return C.ggml_cpu_has_llamafile() != 0 }
