package native

// MaxW8A8Group is the largest rotation group QuantizeActivations takes
// (stable-diffusion.cpp's bound, which its CPU kernels hold on the stack).
const MaxW8A8Group = 256
