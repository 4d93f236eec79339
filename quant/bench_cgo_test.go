//go:build cgo

package quant

import "github.com/sdtool/sdtool/native"

func init() {
	ggmlQuantize = native.QuantizeChunkInto
}
