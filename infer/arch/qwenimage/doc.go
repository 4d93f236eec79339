// Package qwenimage is generate's Qwen-Image family: the engine entries,
// the dual-stream DiT (network "qwen_image") and its Qwen2.5-VL
// conditioner with the chat template (conditioner "qwen_image"). It
// registers them with package infer from init.
package qwenimage
