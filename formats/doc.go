// Package formats is the shared vocabulary of sdtool and the floor every
// other package stands on: the dtype table (DType, TypeInfo), tensor
// descriptors (Tensor), the Model interface with its read helpers, the Open
// registry (formats.Open detects a file's format by content) and the
// Create registry (formats.CreatorFor chooses an output format by file
// extension), the TensorWriter interface, and the errors every container
// reports with: FormatError, ErrFormat and ErrIncomplete. LookupType is the
// one parser of type names (UnknownType its one error) and FormatShape the
// one way shapes are printed.
//
// The containers live one per sub-package (gguf, safetensors, ckpt,
// diffusers, comfyquant) and register themselves from init; a command links
// the ones it needs with blank imports. Package formats imports nothing of
// sdtool.
package formats
