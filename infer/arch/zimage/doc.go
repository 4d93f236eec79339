// Package zimage is generate's Z-Image family: the engine entries, the
// single-stream DiT with its refiners (network "zimage"), its Qwen3
// conditioner (conditioner "zimage") and its shifted flow schedule
// (schedule "zimage"). It registers them with package infer from init.
package zimage
