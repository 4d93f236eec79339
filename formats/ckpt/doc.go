// Package ckpt reads PyTorch checkpoints (.ckpt, .pt, .pth, .bin) written by
// torch.save: the zip format of torch 1.6 and later (ARCHIVE/data.pkl plus
// one uncompressed ARCHIVE/data/KEY record per storage) and the legacy
// format before it (a magic number, a protocol version, system information,
// the pickle, the list of storage keys, then the raw storages).
//
// The pickle is read by a restricted unpickler written for this purpose: it
// implements only the opcodes torch.save emits and accepts only an
// allow-list of globals (the tensor and parameter rebuild functions,
// collections.OrderedDict, torch.Size, the torch storage classes and
// dtypes). Any other global, such as os.system or builtins.eval, is an
// error that names it; nothing from the file is ever imported, called or
// executed.
//
// Tensors are collected from the (nested) dicts of the pickle, named by
// their leaf key, in pickle order, as stable-diffusion.cpp does. Every
// tensor must be contiguous; its Offset is the absolute file offset of its
// bytes, so ReadTensorAt is a plain ReadAt on the file and data is read only
// on demand. Element types are the storages' own (DoubleStorage is F64,
// LongStorage is I64, float8 tensors of newer torch are F8_*); narrowing
// them as stable-diffusion.cpp does is left to the caller.
//
// The package is one room of the formats/ floor (see docs/design.md): struct.go
// holds the shared definitions and registers the format with formats.Open,
// reader.go reads the container and pickle.go the pickle. There is no
// writer: sdtool never writes pickles, so formats.Create has no .ckpt. It
// imports only package formats.
package ckpt
