package avi_test

import (
	"bytes"
	"fmt"
	"image"
	"image/color"

	"github.com/sdtool/sdtool/infer/avi"
)

// Write stores frames of one size as a Motion-JPEG AVI.
func ExampleWrite() {
	var frames []image.Image
	for f := 0; f < 3; f++ {
		img := image.NewGray(image.Rect(0, 0, 16, 16))
		img.SetGray(f, f, color.Gray{255})
		frames = append(frames, img)
	}
	var buf bytes.Buffer
	if err := avi.Write(&buf, frames, avi.Options{FPS: 16}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(buf.Bytes()[:4]), string(buf.Bytes()[8:12]))
	// Output: RIFF AVI
}
