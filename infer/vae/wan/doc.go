// Package wan is the causal 3-D VAE kind ("wan") of Wan 2.1/2.2 and
// Qwen-Image: its configuration from shapes and its decoder and encoder
// graphs, run over the frames in chunks with caches; registered with
// package infer from init.
package wan
