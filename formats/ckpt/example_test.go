package ckpt_test

import (
	"bytes"
	"fmt"

	"github.com/sdtool/sdtool/formats/ckpt"
)

// ExampleParse shows that a checkpoint naming a global outside the
// allow-list is refused before anything from it could run.
func ExampleParse() {
	// Protocol 2: GLOBAL os.system, the argument tuple ("ls",), REDUCE, STOP.
	pkl := []byte("\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.")
	legacy := append([]byte("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.\x80\x02}."), pkl...)
	_, err := ckpt.Parse(bytes.NewReader(legacy), int64(len(legacy)), "evil.ckpt")
	fmt.Println(err)
	// Output:
	// evil.ckpt: reading the pickle: byte 27: global os.system is not allowed (only tensor rebuilding is supported; nothing in the file is executed)
}
