package ckpt

import (
	"archive/zip"
	"encoding/binary"
	"math/big"
	"os"
	"path"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// ErrFormat is wrapped by every *formats.FormatError about a file that is
// not a valid checkpoint or uses a feature this reader does not support;
// it wraps formats.ErrFormat.
var ErrFormat = formats.Sentinel("ckpt: invalid or unsupported PyTorch checkpoint", formats.ErrFormat)

// formatError reports a problem found in one checkpoint (tensor "" when no
// tensor is concerned).
func formatError(file, tensor, msg string) error {
	return &formats.FormatError{File: file, Tensor: tensor, Msg: msg, Err: ErrFormat}
}

// LegacyProtocolVersion is the protocol version legacy checkpoints record.
const LegacyProtocolVersion = 1001

// legacyMagic is the number every legacy checkpoint pickles first.
var legacyMagic, _ = new(big.Int).SetString("1950a86a20f9469cfc6c", 16)

// RootTensorName names the tensor of a checkpoint that holds one bare tensor
// rather than a dict (torch.save(tensor)).
const RootTensorName = "tensor"

// Limits on the values walked to find tensors.
const (
	maxDepth    = 64      // nesting of dicts, lists and tuples
	maxMetadata = 256     // scalar entries reported as metadata
	maxKeyPath  = 1 << 16 // bytes of a dotted key path (tensor names are far shorter)
	// maxAliasFactor bounds the tensors' bytes by the file's: storages
	// shared by several tensors may hold at most this many times the file.
	maxAliasFactor = 2
)

func init() {
	formats.Register(formats.Opener{
		Name: "ckpt",
		// After GGUF (10) and safetensors (20), as in stable-diffusion.cpp's
		// detection order: a zip or a pickle is tried last.
		Priority: 30,
		Match:    Match,
		Open:     OpenModel,
	})
}

// Match reports whether the file at path, whose first bytes are head, is a
// PyTorch checkpoint: a zip archive with a data.pkl record, or a legacy
// pickle starting with torch's magic number.
func Match(filePath string, head []byte) bool {
	if IsZipHead(head) {
		return zipHasDataPkl(filePath, head)
	}
	return head != nil && IsLegacyHead(head)
}

// zipHasDataPkl looks for ROOT/data.pkl: first in the name of the first
// local header (torch.save writes data.pkl first), then in the directory.
func zipHasDataPkl(filePath string, head []byte) bool {
	if len(head) >= 30 {
		n := int(binary.LittleEndian.Uint16(head[26:]))
		if 30+n <= len(head) && isDataPkl(string(head[30:30+n])) {
			return true
		}
	}
	f, err := os.Open(filePath)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false
	}
	zr, err := zip.NewReader(f, st.Size())
	if zr == nil {
		return false
	}
	_ = err // an insecure entry name still yields the directory, which is all we read
	for _, e := range zr.File {
		if isDataPkl(e.Name) {
			return true
		}
	}
	return false
}

func isDataPkl(name string) bool {
	return path.Base(name) == "data.pkl" && strings.Count(name, "/") <= 1
}
