// Package safetensors reads and writes Hugging Face safetensors files: a
// validating reader that reads only the header and fetches tensor data on
// demand, sharded checkpoints (index.json or NAME-0000k-of-0000n names), and a
// streaming writer whose header is computed from the tensor descriptors.
//
// The package is one room of the formats/ floor (see docs/design.md): struct.go
// holds the definitions the reader and writer share and registers the
// format with formats.Open and formats.Create, reader.go and writer.go
// mirror each other, shard.go joins sharded checkpoints, json.go is the
// header's strict JSON scanner, metaarray.go the typed JSON text a GGUF
// array takes in __metadata__ (which holds strings only). It imports only
// package formats.
package safetensors
