"""sdtool's oracle for ComfyUI's quantized formats (nvfp4, mxfp8,
convrot_w4a4, asym_w4a8_int8), run with Debian's python3-torch on CPU.

Usage: comfy_oracle.py KITCHEN_DIR SOURCE.safetensors QUANT.safetensors DECODED.safetensors

SOURCE holds the float weights sdtool quantized, QUANT sdtool's ComfyUI
file, DECODED sdtool's own float32 decode of QUANT. For every comfy_quant
module of QUANT it loads the tensors the way ComfyUI's loader
(comfy/ops.py _load_quantized_module) consumes them, dequantizes them with
comfy-kitchen's eager reference code, and compares: sdtool's decode with
kitchen's (max relative difference), sdtool's bytes with kitchen
quantizing the same source weight (share of equal weight bytes and equal
scales), and the output error of a linear layer on random activations,
sdtool's file against ComfyUI quantizing the layer itself (ratio). For
asym_w4a8_int8 every byte that differs from kitchen's must sit at a
rounding tie (w4a8_unexplained). It
prints one JSON object per module and exits 1 when a check fails.
"""
import importlib, json, sys, types

import torch
from safetensors import safe_open

KITCHEN, SRC, QUANT, DEC = sys.argv[1:5]
if not hasattr(torch, "float8_e8m0fnu"):
    torch.float8_e8m0fnu = torch.uint8  # torch 2.6: E8M0 codes stay bytes
# Load the eager modules without the package __init__ (it needs newer torch).
for name, sub in [("comfy_kitchen", ""), ("comfy_kitchen.backends", "/backends"),
                  ("comfy_kitchen.backends.eager", "/backends/eager"), ("comfy_kitchen.tensor", "/tensor")]:
    mod = types.ModuleType(name)
    mod.__path__ = [KITCHEN + sub]
    sys.modules[name] = mod
q = importlib.import_module("comfy_kitchen.backends.eager.quantization")
w4a4 = importlib.import_module("comfy_kitchen.backends.eager.convrot_w4a4")
w4a8 = importlib.import_module("comfy_kitchen.backends.eager.w4a8_int8")
F32 = torch.float32


def tensors(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def w4a8_unexplained(W, w, s_rel, ref_q, ref_rel, ref_ch, cb, gs, g):
    """Counts the asym_w4a8_int8 groups and codes where sdtool's bytes differ
    from kitchen's other than at a rounding tie that a last-ulp difference
    in the float32 sums decides: a relative scale whose unrounded value (by
    kitchen's own steps) is within 1e-5 of the midpoint of the two adjacent
    FP8 codes written, or a code whose value over the channel scale is within
    1e-4 of the midpoint of the two levels chosen."""
    rot = q.rotate_int8_convrot_weight(W.contiguous(), g).float()
    x = rot.view(W.shape[0], -1, gs)
    scale = x.abs().amax(-1, keepdim=True).clamp(min=1e-8)
    codes = w4a8._assign_codes(x / scale, cb)
    for _ in range(w4a8._ALS_ITERS):
        c = cb[codes]
        scale = ((x * c).sum(-1, keepdim=True) / (c * c).sum(-1, keepdim=True).clamp(min=1e-8)).clamp(min=1e-8)
        codes = w4a8._assign_codes(x / scale, cb)
    ratio = scale.squeeze(-1) / ref_ch.unsqueeze(1)
    mine_rel, ref_rel8 = s_rel.view(torch.uint8), ref_rel.view(torch.uint8)
    bad = 0
    for r, grp in (mine_rel != ref_rel8).nonzero().tolist():
        a, b = s_rel[r, grp].float().item(), ref_rel[r, grp].float().item()
        adjacent = abs(int(mine_rel[r, grp]) - int(ref_rel8[r, grp])) == 1
        bad += not (adjacent and abs(ratio[r, grp].item() - (a + b) / 2) <= 1e-5 * abs(ratio[r, grp].item()))
    for r, byte in (w != ref_q).nonzero().tolist():
        for col in (2 * byte, 2 * byte + 1):
            grp = col // gs
            if mine_rel[r, grp] != ref_rel8[r, grp]:
                continue  # decided by the group's scale above
            mine, theirs = (int(w[r, byte]) >> (4 * (col % 2))) & 15, (int(ref_q[r, byte]) >> (4 * (col % 2))) & 15
            if mine == theirs:
                continue
            levels = (cb * ref_rel[r, grp].float()).round().clamp(-127, 127)
            mid = (levels[mine] + levels[theirs]).item() / 2
            bad += abs((rot[r, col] / ref_ch[r]).item() - mid) > 1e-4 * max(1.0, abs(mid))
    return bad


src, qt, dec = tensors(SRC), tensors(QUANT), tensors(DEC)
torch.manual_seed(0)
failed = False
for key in sorted(k for k in qt if k.endswith(".comfy_quant")):
    prefix = key[: -len("comfy_quant")]
    conf = json.loads(qt[key].numpy().tobytes())
    fmt = conf["format"]
    used = {key, prefix + "weight"}

    def pop(name, view=None):
        used.add(prefix + name)
        v = qt.get(prefix + name)
        return v.view(view) if v is not None and view is not None else v

    w = qt[prefix + "weight"]
    unexplained = 0
    W = src[prefix + "weight"].to(F32)
    out_f, in_f = W.shape
    g = int(conf.get("convrot_groupsize", 256))
    # ComfyUI's loader: the scales each format pops, the storage dtype it casts the weight to.
    if fmt == "nvfp4":
        ts, bs = pop("weight_scale_2"), pop("weight_scale", torch.float8_e4m3fn)
        deq = q.dequantize_nvfp4(w.to(torch.uint8), ts, bs, F32)
        ref_q, ref_bs = q.quantize_nvfp4(W, torch.amax(W.abs()) / (448.0 * 6.0))
        ref = q.dequantize_nvfp4(ref_q, torch.amax(W.abs()) / (448.0 * 6.0), ref_bs, F32)
        same = [(w == ref_q).float().mean().item(), (bs.view(torch.uint8) == ref_bs.view(torch.uint8)).float().mean().item()]
    elif fmt == "mxfp8":
        bs = pop("weight_scale", torch.uint8)
        deq = q.dequantize_mxfp8(w.to(torch.float8_e4m3fn), bs, F32)
        ref_q, ref_bs = q.quantize_mxfp8(W)
        ref = q.dequantize_mxfp8(ref_q, ref_bs, F32)
        same = [(w.view(torch.uint8) == ref_q.view(torch.uint8)).float().mean().item(),
                (bs == ref_bs.view(torch.uint8)).float().mean().item()]
    elif fmt == "convrot_w4a4":
        sc = pop("weight_scale")
        deq = w4a4.dequantize_convrot_w4a4_weight(w.to(torch.int8), sc, g, 64, F32)
        ref_q, ref_sc = w4a4.quantize_convrot_w4a4_weight(W, g, 64)
        ref = w4a4.dequantize_convrot_w4a4_weight(ref_q, ref_sc, g, 64, F32)
        same = [(w == ref_q).float().mean().item(), ((sc - ref_sc).abs() <= 1e-6 * ref_sc.abs()).float().mean().item()]
    elif fmt == "asym_w4a8_int8":
        gs = int(conf.get("group_size", 16))
        s_rel = pop("weight_s_rel")
        if s_rel.dtype == torch.uint8:
            s_rel = s_rel.view(torch.float8_e4m3fn)
        s_ch, cb = pop("weight_s_channel"), pop("weight_codebook")
        deq = w4a8.dequantize_w4a8_int8_weight(w.to(torch.int8), s_rel, s_ch, cb, None, gs, g, F32)
        ref_q, ref_rel, ref_ch, _, ref_cb = w4a8.quantize_w4a8_int8_weight(W, gs, g)
        ref = w4a8.dequantize_w4a8_int8_weight(ref_q, ref_rel, ref_ch, ref_cb, None, gs, g, F32)
        same = [(w == ref_q).float().mean().item(), (s_rel.view(torch.uint8) == ref_rel.view(torch.uint8)).float().mean().item()]
        if torch.equal(cb, ref_cb):
            unexplained = w4a8_unexplained(W, w, s_rel, ref_q, ref_rel, ref_ch, ref_cb, gs, g)
        else:  # a fitted table of kitchen's own: the codes are not comparable
            unexplained = int((w != ref_q).sum())
    else:
        continue
    for extra in ("input_scale", "pre_quant_scale"):
        used.add(prefix + extra)
    left = sorted(k for k in qt if k.startswith(prefix) and k[len(prefix):].count(".") == 0 and k not in used and k != prefix + "bias")
    mine = dec[prefix + "weight"].to(F32)
    decode_diff = ((mine - deq).abs().max() / deq.abs().max().clamp(min=1e-30)).item()
    x = torch.randn(32, in_f)
    y = x @ W.t()
    err_sd = ((x @ deq.t() - y).norm() / y.norm()).item()
    err_ck = ((x @ ref.t() - y).norm() / y.norm()).item()
    r = {"module": prefix[:-1], "format": fmt, "shape": [out_f, in_f], "unconsumed": left,
         "decode_max_rel_diff": decode_diff, "equal_weight_bytes": same[0], "equal_scales": same[1],
         "out_err_sdtool": err_sd, "out_err_comfyui": err_ck, "ratio": err_sd / max(err_ck, 1e-30),
         "unexplained_differences": unexplained}
    bad = left or decode_diff > 1e-5 or r["ratio"] > 1.10 or unexplained > 0
    r["ok"] = not bad
    failed |= bool(bad)
    print(json.dumps(r))
sys.exit(1 if failed else 0)
