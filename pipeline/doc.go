// Package pipeline is the streaming engine every writing command runs on,
// and the one place for what writing a file involves.
//
// A Plan lists everything decided before any byte is written: the output
// path and format (formats.CreatorFor), the header settings, every output
// tensor (name, type, shape, producer, and for the dry-run table its
// source and a note), the inputs, and the summary's notes. Producers fill
// row chunks: Copy (raw bytes), Convert (any tensor read as float32 through
// package tensor, then encoded), Constant, or a command's own. Run produces
// the chunks on a worker pool within a memory budget, writes them strictly
// in header order through a formats.TensorWriter, and publishes the file
// atomically; RunAll is the same engine over several plans (a ladder's
// rungs), decoding a source that several of them convert once; WriteTable prints a plan for --dry-run and WriteSummary its
// totals. The atomic publish (CreateAtomic, WriteAtomic: an exclusive
// .partial, fsync, rename; CheckOutput refuses a bad output, its folder
// included, before any work) is what every writer in sdtool uses,
// HumanBytes and ParseBytes the one way sizes are printed and read, Count
// the one way counts are, ParseRules the one parser of PATTERN=TYPE rules
// (UnmatchedRules finds the ones that match nothing), and CarryMetadata
// what an output keeps of its input's metadata.
//
// Inputs are read with ReadAt into bounded buffers, never mapped or read
// whole, so peak memory does not grow with the model. Progress is reported
// through a callback and cancellation through the context: progress bars
// and signals belong to the command (cmd/sdtool).
//
// On the map (docs/design.md) pipeline sits under convert, quantize and merge
// and above tensor, quant and formats.
package pipeline
