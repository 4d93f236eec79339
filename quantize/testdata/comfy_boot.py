"""Imports ComfyUI's comfy.sd (and makes comfy.utils, comfy.quant_ops importable) for
sdtool's oracle scripts, with Debian trixie's python3-torch 2.6 on CPU: boot(COMFYUI_DIR,
KITCHEN_DIR) before any comfy import.

Stubs (modules the import chain of comfy.sd names but loading a model,
running its layers, sampling with Euler and decoding with its VAE never
use; absent from Debian trixie): comfy_aimdo
(dynamic VRAM offloading), transformers, tokenizers, sentencepiece, regex
and ftfy (text encoders' tokenizers), torchvision, torchaudio, av,
soundfile, cv2, trimesh, kornia, spandrel, torchsde, aiohttp, pydantic,
blake3, simpleeval. torch.library.custom_op gets builtin generic
annotations (list[int], X | None) rewritten to typing's forms, which
comfy-kitchen uses and torch 2.6 does not read, and torch.float8_e8m0fnu
(torch 2.7) is torch.uint8, so MXFP8's E8M0 block scales stay bytes.
"""
import importlib.abc
import importlib.machinery
import sys
import types
import typing
from unittest import mock

import torch

STUBS = ("comfy_aimdo", "transformers", "tokenizers", "sentencepiece", "regex", "ftfy", "torchvision", "torchaudio",
         "av", "soundfile", "cv2", "trimesh", "kornia", "spandrel", "torchsde", "aiohttp", "pydantic", "blake3",
         "simpleeval")


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an import of a stubbed package with a module whose every attribute is a mock."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name)
        m.__path__, m.__spec__, m.__name__ = [], spec, spec.name
        return m

    def exec_module(self, module):
        pass


def typing_form(t):
    if t is type(None):
        return None
    if isinstance(t, types.UnionType):
        return typing.Union[tuple(typing_form(a) or type(None) for a in t.__args__)]
    if isinstance(t, types.GenericAlias) and t.__origin__ is list:
        return typing.List[typing_form(t.__args__[0])]
    return t


_custom_op = torch.library.custom_op


def custom_op(name, fn=None, **kw):
    def wrap(f):
        f.__annotations__ = {k: typing_form(v) for k, v in typing.get_type_hints(f).items()}
        return _custom_op(name, **kw)(f)
    return wrap if fn is None else wrap(fn)


def boot(comfy, kitchen):
    """Puts the stubs and shims in place and imports comfy.sd from the tree at comfy, on CPU."""
    sys.meta_path.insert(0, StubFinder())
    torch.library.custom_op = custom_op
    if not hasattr(torch, "float8_e8m0fnu"):
        torch.float8_e8m0fnu = torch.uint8  # torch 2.6: MXFP8's E8M0 block scales stay bytes
    sys.path[:0] = [comfy, kitchen]
    argv, sys.argv = sys.argv, sys.argv[:1]  # ComfyUI parses the command line
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    import comfy.sd  # noqa: F401
    sys.argv = argv


