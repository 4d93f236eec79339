"""Samples a Flux checkpoint and its ComfyUI-format copies with ComfyUI's
own sampler and model (Debian trixie's python3-torch 2.6, CPU), and prints
each copy's latent PSNR against the source's.

Usage: comfy_render.py COMFYUI_DIR KITCHEN_DIR SOURCE.safetensors QUANT.safetensors...

Every file is loaded by comfy.sd.load_checkpoint_guess_config. The conditioning is a fixed random T5-width context (64 tokens) and
pooled CLIP vector (ComfyUI's text encoders need tokenizers this
environment lacks, and the same tensors go to every file), guidance 3.5;
comfy.sample.sample runs Euler with the simple schedule, 4 steps, CFG 1,
seed 42, on the latent of a 128x128 image. The PSNR is over the final
latents, with the source latent's range as the peak, with the relative RMS
error and the cosine similarity (generate --compare's latent_cosine) beside
it. The images are not decoded: ComfyUI builds the Flux VAE's
encoder at its fixed width (128 channels), which a narrow synthetic VAE
does not fit. One JSON object per file.
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
    patcher = comfy.sd.load_checkpoint_guess_config(path, output_vae=False, output_clip=False)[0]
    dm = patcher.model.diffusion_model
    gen = torch.Generator().manual_seed(0)
    context = torch.randn(1, TOKENS, dm.txt_in.in_features, generator=gen)
    pooled = torch.randn(1, dm.vector_in.in_layer.in_features, generator=gen)
    cond = [[context, {"pooled_output": pooled, "guidance": 3.5}]]
    latent = torch.zeros(1, 16, SIZE // 8, SIZE // 8)
    noise = comfy.sample.prepare_noise(latent, SEED)
    with torch.no_grad():
        return comfy.sample.sample(patcher, noise, STEPS, 1.0, "euler", "simple", cond, cond, latent,
                                   seed=SEED, disable_pbar=True).float()


def compare(got, want):
    rmse = ((got - want) ** 2).mean().sqrt().item()
    peak = (want.max() - want.min()).item()
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0).item()
    return {"psnr": math.inf if rmse == 0 else 20 * math.log10(peak / rmse), "rel_rms": rmse / want.pow(2).mean().sqrt().item(),
            "latent_cosine": cos}


want = render(SRC)
print(json.dumps({"file": SRC, "shape": list(want.shape)}))
for q in QUANTS:
    print(json.dumps({"file": q, **compare(render(q), want)}))
    sys.stdout.flush()
