// Package names converts tensor names the way stable-diffusion.cpp's
// --convert-name does, for the model version that conversion depends on.
//
// stable-diffusion.cpp (sd.cpp) accepts weights in many naming schemes
// (original LDM/BFL checkpoints, diffusers folders and single files, open_clip,
// llama.cpp-style GGUF, kohya/peft LoRAs) and maps every name onto one internal
// scheme before it builds its graphs. Convert reproduces the name that sd.cpp's
// convert_tensor_name returns for a name and version, VersionOf reads the
// version its get_sd_version reports off the family table, and ConvertAll converts a whole tensor list and refuses
// collisions. The mappings are tables of data (see tables.go); the functions
// only walk them.
//
// Covered: the top-level prefixes; diffusers UNet to LDM for SD 1.x/2.x and
// SDXL (and SDXL ControlNet); diffusers DiT to original for SD3, Flux.1/.2 and
// LongCat, Z-Image, Anima, Hunyuan Video and Krea 2; the SD/Flux VAE and the Wan VAE (Wan 2.x,
// Qwen-Image, Anima, Krea 2); open_clip to HF CLIP; llama.cpp GGUF T5, LLM and LLM
// vision names to HF; LoRA wrappers, suffixes and kohya separators;
// IP-Adapter and PhotoMaker; Krea 2's Qwen3-VL vision tower. Not covered:
// LLaDA-Image, the families after Krea 2 in sd.cpp's list (Qwen-Image 2.1,
// Boogu, MAGE-Flow, MiniMax), and ESRGAN (see Other).
//
// The behaviour follows sd.cpp's src/name_conversion.cpp and
// src/model_loader.cpp (2026, the streaming-convert era). Where sd.cpp fuses
// or splits tensors at load time (q/k/v into qkv, open_clip's in_proj into
// q/k/v), the converter alone only renames: Convert returns exactly what
// sd.cpp's name converter returns, for example "...img_attn.qkv.weight.1" for
// a Flux diffusers to_k.
//
// Which family a checkpoint belongs to, and its components, is the family
// package's job (family.Detect); sd.cpp's version is a column of that
// table (with where sd.cpp looks and what else it needs, family/sdcpp.go),
// so there is one detector. Version is the conversion's parameter.
//
// On the map (docs/design.md) names sits beside quant, above family and formats:
// inspect, quantize, convert and infer use it.
package names
