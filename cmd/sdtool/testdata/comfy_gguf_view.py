# Prints, as JSON, what ComfyUI-GGUF's gguf_sd_loader (city96/ComfyUI-GGUF loader.py) builds from a GGUF through
# its gguf-py dependency: the general.architecture string (None when absent), and per tensor the state-dict key
# (model.diffusion_model. stripped when any tensor has it), the torch shape (comfy.gguf.orig_shape.<name> when
# present, else the stored dims reversed) and the ggml type name. Used by TestLoadTable.
import json
import sys

import gguf

PREFIX = "model.diffusion_model."


def field_str(reader, key):
    f = reader.get_field(key)
    if f is None:
        return None
    return str(bytes(f.parts[f.data[-1]]), encoding="utf-8")


def orig_shape(reader, name):
    f = reader.get_field("comfy.gguf.orig_shape." + name)
    if f is None:
        return None
    if len(f.types) != 2 or f.types[0] != gguf.GGUFValueType.ARRAY or f.types[1] != gguf.GGUFValueType.INT32:
        raise TypeError("bad orig_shape for " + name)
    return [int(f.parts[i][0]) for i in f.data]


def main(path):
    reader = gguf.GGUFReader(path)
    names = [t.name for t in reader.tensors]
    strip = any(n.startswith(PREFIX) for n in names)
    out = {"arch": field_str(reader, "general.architecture"), "tensors": []}
    for t in reader.tensors:
        key = t.name
        if strip:
            if not key.startswith(PREFIX):
                continue
            key = key[len(PREFIX):]
        shape = orig_shape(reader, t.name)
        if shape is None:
            shape = [int(v) for v in reversed(t.shape)]
        out["tensors"].append([key, shape, t.tensor_type.name])
    json.dump(out, sys.stdout)


main(sys.argv[1])
