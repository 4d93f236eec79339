// Package t5 is the T5 text encoder kind ("t5": T5 v1.1 and UMT5): its
// configuration from shapes, its graph, its tokenizer loader and the
// prompt encoding conditioners call, registered with package infer from
// init.
package t5
