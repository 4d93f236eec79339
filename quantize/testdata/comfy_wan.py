"""sdtool's check that a ComfyUI-format Wan file loads as ComfyUI loads Wan,
run with Debian's python3-torch on CPU.

Usage: comfy_wan.py SOURCE.safetensors QUANT.safetensors...

ComfyUI's repository and its Python dependencies are not available
offline, so this restates the parts of its loader that a Wan file meets:
model detection (comfy/model_detection.py reads dim from
head.modulation, out_dim from head.head.weight, in_dim from
patch_embedding.weight's second dimension, ffn_dim and the block count),
the patch embedding built as a float32 Conv3d with kernel and stride
(1, 2, 2) and loaded strictly from the stored weight, and the per-layer
markers, whose format must be one ComfyUI knows and whose layer must be
one its Wan model builds as a Linear. It prints one JSON object per QUANT
file and exits 1 when a check fails.
"""
import json, re, sys

import torch
from safetensors import safe_open

SRC, QUANTS = sys.argv[1], sys.argv[2:]
FORMATS = {"float8_e4m3fn", "float8_e5m2", "int8_tensorwise", "nvfp4", "mxfp8", "convrot_w4a4", "asym_w4a8_int8"}
# Layers WanModel builds with operations.Linear (comfy/ldm/wan/model.py).
LINEAR = re.compile(r"^(text_embedding\.[02]|time_embedding\.[02]|time_projection\.1|head\.head|img_emb\.proj\.[13]|"
                    r"blocks\.\d+\.(self_attn|cross_attn)\.(q|k|v|o|k_img|v_img)|blocks\.\d+\.ffn\.[02])$")


def tensors(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def config(sd):
    blocks = {int(k.split(".")[1]) for k in sd if k.startswith("blocks.")}
    return {"dim": sd["head.modulation"].shape[-1], "out_dim": sd["head.head.weight"].shape[0] // 4,
            "in_dim": sd["patch_embedding.weight"].shape[1], "ffn_dim": sd["blocks.0.ffn.0.weight"].shape[0],
            "num_layers": len(blocks)}


def patch_embedding(sd, cfg):
    conv = torch.nn.Conv3d(cfg["in_dim"], cfg["dim"], kernel_size=(1, 2, 2), stride=(1, 2, 2), dtype=torch.float32)
    conv.load_state_dict({"weight": sd["patch_embedding.weight"].float(), "bias": sd["patch_embedding.bias"].float()}, strict=True)
    return conv


def check(path, src):
    qt = tensors(path)
    problems = []
    cfg_src, cfg_q = config(src), config(qt)
    if cfg_src != cfg_q:
        problems.append(f"detected config {cfg_q}, source {cfg_src}")
    torch.manual_seed(0)
    x = torch.randn(1, cfg_src["in_dim"], 2, 8, 8)
    diff = None
    with torch.no_grad():
        want = patch_embedding(src, cfg_src)(x)
        try:
            got = patch_embedding(qt, cfg_q)(x)
            diff = ((got - want).abs().max() / want.abs().max()).item()
        except Exception as e:  # a shape ComfyUI's Conv3d refuses
            problems.append(f"patch_embedding: {e}")
    if diff is not None and diff > 1e-6:
        problems.append(f"patch_embedding output differs from the source's by {diff}")
    modules = 0
    for key in sorted(k for k in qt if k.endswith(".comfy_quant")):
        name = key[: -len(".comfy_quant")]
        fmt = json.loads(qt[key].numpy().tobytes()).get("format")
        modules += 1
        if fmt not in FORMATS:
            problems.append(f"{name}: format {fmt!r} unknown to ComfyUI")
        if not LINEAR.match(name):
            problems.append(f"{name}: not a Linear layer of ComfyUI's WanModel")
    if modules == 0:
        problems.append("no comfy_quant modules")
    print(json.dumps({"file": path, "config": cfg_q, "patch_embedding_shape": list(qt["patch_embedding.weight"].shape),
                      "patch_embedding_max_rel_diff": diff, "modules": modules, "problems": problems}))
    return not problems


source = tensors(SRC)
ok = [check(q, source) for q in QUANTS]
sys.exit(0 if all(ok) else 1)
