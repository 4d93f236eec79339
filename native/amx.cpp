//go:build cgo

// ggml-cpu.cpp offers an AMX buffer type whenever the compiler targets AMX
// (-march=native on Intel Sapphire Rapids and later), but the Go package
// that ggml comes from does not compile ggml's amx sources, so every cgo
// binary failed to link there with an undefined ggml_backend_amx_buffer_type.
// Answering "none" keeps ggml on its AVX-512 kernels, which is what it runs
// on such a CPU when built without AMX. Weak, so that a ggml which does
// compile its amx sources keeps its own.
#if defined(__AMX_INT8__) && defined(__AVX512VNNI__)
struct ggml_backend_buffer_type;

__attribute__((weak)) ggml_backend_buffer_type * ggml_backend_amx_buffer_type(void) { return nullptr; }
#endif
