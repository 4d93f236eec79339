"""sdtool's check that its ComfyUI-format files load through ComfyUI's own
loader and run through ComfyUI's own layers, with Debian trixie's
python3-torch 2.6 on CPU.

Usage: comfy_loader.py COMFYUI_DIR KITCHEN_DIR SOURCE.safetensors QUANT.safetensors...

COMFYUI_DIR is a ComfyUI tree (quantize/testdata/fetch_comfyui.md says how
it is obtained), KITCHEN_DIR the folder holding comfy-kitchen's
comfy_kitchen package. SOURCE holds the float weights sdtool quantized
(the same tensor names), each QUANT one of sdtool's files.

Each QUANT file is loaded by comfy.sd.load_checkpoint_guess_config (a file
with model.diffusion_model. keys) or comfy.sd.load_diffusion_model (a bare
diffusion model): ComfyUI detects the model, builds it with its
mixed-precision operations and loads the state dict. The file fails when
the loader reports a missing or unexpected key, or when a layer with a
comfy_quant marker did not become a quantized layer of the marker's
format. Then, for every such layer, random activations go through the
layer's own forward (ComfyUI's runtime on this CPU), once with the file's
weight and once with ComfyUI quantizing the source weight itself
(QuantizedTensor.from_float with the layout's options, a fresh codebook
for asym_w4a8_int8); both are compared with the float product. A layer
fails when its error is over 1.10 times ComfyUI's own. Each layer's line
also has the error of the file's weight dequantized and multiplied in the
compute dtype (out_err_dequantized) and how far the runtime's output is
from that product (runtime_vs_dequantized): near zero where ComfyUI
dequantizes the weight on this CPU, the activations' quantization error
where it quantizes them too.

It prints one JSON object per layer and one per file, and exits 1 when a
check fails.

The stubs and shims that let ComfyUI import here are in comfy_boot.py.
"""
import json
import logging
import sys

import torch

import comfy_boot

COMFY, KITCHEN, SRC, QUANTS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
comfy_boot.boot(COMFY, KITCHEN)
import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402
from comfy.quant_ops import QUANT_ALGOS, QuantizedTensor  # noqa: E402


class Warnings(logging.Handler):
    """Keeps the loader's warnings (missing and unexpected keys among them)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def reference(module, w):
    """ComfyUI quantizing the float weight w with the options of module's loaded layout."""
    qw = module.weight
    kw = qw.layout_cls.requantize_kwargs(qw)
    kw.pop("codebook_tensor", None)  # asym_w4a8_int8: fit a codebook of its own
    return QuantizedTensor.from_float(w.to(qw._params.orig_dtype), qw._layout_cls, scale="recalculate", **kw)


def check_layer(name, module, conf, w, gen):
    fmt = conf.get("format")
    r = {"layer": name, "format": fmt, "shape": list(w.shape)}
    if not isinstance(module.weight, QuantizedTensor) or getattr(module, "quant_format", None) != fmt:
        r["problem"] = f"loaded as {type(module).__name__} with a {type(module.weight).__name__} weight, not {fmt}"
        return r
    r["layout"] = module.weight._layout_cls
    if module.weight._layout_cls != QUANT_ALGOS[fmt]["comfy_tensor_layout"]:
        r["problem"] = f"layout {module.weight._layout_cls}"
        return r
    dtype = module.weight._params.orig_dtype
    x = torch.randn(32, w.shape[1], generator=gen).to(dtype)
    want = x.float() @ w.float().t()
    bias = module.bias.float() if module.bias is not None else 0
    with torch.no_grad():
        got = module(x).float() - bias
        loaded = module.weight
        module.weight = torch.nn.Parameter(reference(module, w), requires_grad=False)
        ref = module(x).float() - bias
        module.weight = loaded
        deq = torch.nn.functional.linear(x, module.weight.dequantize().to(dtype)).float()
    r["dtype"] = str(dtype).removeprefix("torch.")
    r["out_err_file"] = ((got - want).norm() / want.norm()).item()
    r["out_err_dequantized"] = ((deq - want).norm() / want.norm()).item()
    r["runtime_vs_dequantized"] = ((got - deq).norm() / deq.norm()).item()
    r["out_err_comfyui"] = ((ref - want).norm() / want.norm()).item()
    r["ratio"] = r["out_err_file"] / max(r["out_err_comfyui"], 1e-30)
    if not r["ratio"] <= 1.10:
        r["problem"] = "output error over 1.10 times ComfyUI's own"
    return r


def load(path, sd):
    if any(k.startswith("model.diffusion_model.") for k in sd):
        out = comfy.sd.load_checkpoint_guess_config(path, output_vae=False, output_clip=False, output_clipvision=False)
        return out[0], "model.diffusion_model."
    return comfy.sd.load_diffusion_model(path), ""


def check_file(path, src, gen):
    sd = comfy.utils.load_torch_file(path)
    markers = {k[: -len(".comfy_quant")]: json.loads(v.numpy().tobytes()) for k, v in sd.items() if k.endswith(".comfy_quant")}
    handler = Warnings()
    logging.getLogger().addHandler(handler)
    try:
        patcher, prefix = load(path, sd)
    finally:
        logging.getLogger().removeHandler(handler)
    model = patcher.model
    problems = [line for line in handler.lines if line.startswith(("unet missing", "unet unexpected"))]
    layers, failed = 0, False
    for name, conf in sorted(markers.items()):
        inner = name[len(prefix):] if name.startswith(prefix) else name
        try:
            module = model.diffusion_model.get_submodule(inner)
        except AttributeError:
            problems.append(f"{name}: no such layer in ComfyUI's {type(model.diffusion_model).__name__}")
            continue
        r = check_layer(name, module, conf, src[name + ".weight"], gen)
        layers += 1
        failed |= "problem" in r
        print(json.dumps(r))
    linears = sum(isinstance(m, torch.nn.Module) and hasattr(m, "quant_format") for m in model.diffusion_model.modules())
    if not markers:
        problems.append("no comfy_quant layers")
    print(json.dumps({"file": path, "model": type(model).__name__, "diffusion_model": type(model.diffusion_model).__name__,
                      "markers": len(markers), "quantized_layers": linears, "problems": problems}))
    return not problems and not failed and linears == len(markers)


src = comfy.utils.load_torch_file(SRC)
gen = torch.Generator().manual_seed(0)
ok = [check_file(q, src, gen) for q in QUANTS]
sys.exit(0 if all(ok) else 1)
