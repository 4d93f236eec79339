// Package clip is the CLIP text encoder kind ("clip": CLIP-L, OpenCLIP-H
// and bigG): its configuration from shapes, its graph and its tokenizer
// loader, registered with package infer from init.
package clip
