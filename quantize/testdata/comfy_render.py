"""Renders a Flux checkpoint and its ComfyUI-format copies with ComfyUI's
own sampler, model and VAE (Debian trixie's python3-torch 2.6, CPU), and
prints each copy's image PSNR against the source's.

Usage: comfy_render.py COMFYUI_DIR KITCHEN_DIR SOURCE.safetensors QUANT.safetensors...

Every file is loaded by comfy.sd.load_checkpoint_guess_config with its
VAE. The conditioning is a fixed random T5-width context (64 tokens) and
pooled CLIP vector (ComfyUI's text encoders need tokenizers this
environment lacks, and the same tensors go to every file), guidance 3.5;
comfy.sample.sample runs Euler with the simple schedule, 4 steps, CFG 1,
seed 42, on a 128x128 latent, and the VAE decodes it. PSNR is on the 8-bit
images. One JSON object per file.
"""
import json
import math
import sys

import torch

import comfy_boot

COMFY, KITCHEN, SRC, QUANTS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
comfy_boot.boot(COMFY, KITCHEN)
import comfy.sample  # noqa: E402
import comfy.sd  # noqa: E402

SEED, STEPS, SIZE, TOKENS = 42, 4, 128, 64


def render(path):
    patcher, _, vae = comfy.sd.load_checkpoint_guess_config(path, output_vae=True, output_clip=False)[:3]
    dm = patcher.model.diffusion_model
    gen = torch.Generator().manual_seed(0)
    context = torch.randn(1, TOKENS, dm.txt_in.in_features, generator=gen)
    pooled = torch.randn(1, dm.vector_in.in_layer.in_features, generator=gen)
    cond = [[context, {"pooled_output": pooled, "guidance": 3.5}]]
    latent = torch.zeros(1, 16, SIZE // 8, SIZE // 8)
    noise = comfy.sample.prepare_noise(latent, SEED)
    with torch.no_grad():
        samples = comfy.sample.sample(patcher, noise, STEPS, 1.0, "euler", "simple", cond, cond, latent,
                                      seed=SEED, disable_pbar=True)
        image = vae.decode(samples)
    return (image.float().clamp(0, 1) * 255).round()


def psnr(a, b):
    mse = ((a - b) ** 2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse)


want = render(SRC)
print(json.dumps({"file": SRC, "shape": list(want.shape)}))
for q in QUANTS:
    print(json.dumps({"file": q, "psnr": psnr(render(q), want)}))
    sys.stdout.flush()
