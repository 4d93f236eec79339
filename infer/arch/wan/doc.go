// Package wan is generate's Wan 2.1/2.2 video family: the engine entries,
// the video DiT with its high-noise expert (network "wan") and its UMT5
// conditioner (conditioner "wan"). It registers them with package infer
// from init.
package wan
