// Package avi writes Motion-JPEG AVI files: a video as one file that
// players and browsers' video tools open, in pure Go. Each frame is a
// baseline JPEG (image/jpeg) in a RIFF AVI 1.0 container with an idx1
// index, the layout stable-diffusion.cpp's sd-cli writes for .avi output.
package avi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"io"
)

// ErrFormat is wrapped by the errors of frames Write cannot store.
var ErrFormat = errors.New("avi: invalid video")

// Options are the settings of Write.
type Options struct {
	// FPS is the frame rate (frames per second, at least 1).
	FPS int
	// Quality is the JPEG quality, 1 to 100 (0: 90).
	Quality int
}

// maxFrameBytes bounds one encoded frame, well inside RIFF's 32-bit sizes.
const maxFrameBytes = 256 << 20

// Write encodes frames, all of the same size, as an MJPEG AVI to w.
func Write(w io.Writer, frames []image.Image, opt Options) error {
	if len(frames) == 0 {
		return fmt.Errorf("%w: no frames", ErrFormat)
	}
	if opt.FPS < 1 || opt.FPS > 1000 {
		return fmt.Errorf("%w: frame rate %d must be in [1, 1000]", ErrFormat, opt.FPS)
	}
	q := opt.Quality
	if q == 0 {
		q = 90
	}
	b := frames[0].Bounds()
	jpegs := make([][]byte, len(frames))
	maxSize := 0
	for i, f := range frames {
		if f.Bounds().Dx() != b.Dx() || f.Bounds().Dy() != b.Dy() {
			return fmt.Errorf("%w: frame %d is %dx%d, frame 0 %dx%d", ErrFormat, i, f.Bounds().Dx(), f.Bounds().Dy(), b.Dx(), b.Dy())
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, f, &jpeg.Options{Quality: q}); err != nil {
			return fmt.Errorf("avi: frame %d: %w", i, err)
		}
		if buf.Len() > maxFrameBytes {
			return fmt.Errorf("%w: frame %d encodes to %d bytes", ErrFormat, i, buf.Len())
		}
		jpegs[i] = buf.Bytes()
		maxSize = max(maxSize, buf.Len())
	}
	return writeRIFF(w, jpegs, b.Dx(), b.Dy(), opt.FPS, maxSize)
}

// chunk is a RIFF chunk or LIST under construction: its fourcc, its list
// type ("" for a plain chunk) and its body.
type chunk struct {
	id, list string
	body     bytes.Buffer
}

// bytes returns the chunk with its header and padding to an even size.
func (c *chunk) bytes() []byte {
	var out bytes.Buffer
	out.WriteString(c.id)
	n := c.body.Len()
	if c.list != "" {
		n += 4
	}
	binary.Write(&out, binary.LittleEndian, uint32(n))
	out.WriteString(c.list)
	out.Write(c.body.Bytes())
	if out.Len()%2 != 0 {
		out.WriteByte(0)
	}
	return out.Bytes()
}

// le writes little-endian values into a chunk's body.
func le(c *chunk, vs ...any) {
	for _, v := range vs {
		binary.Write(&c.body, binary.LittleEndian, v)
	}
}

// writeRIFF lays out the AVI: hdrl (avih, one video strl), movi (00dc
// frames) and idx1 (offsets from the movi list's type field).
func writeRIFF(w io.Writer, jpegs [][]byte, width, height, fps, maxSize int) error {
	n := uint32(len(jpegs))
	usPerFrame := uint32(1_000_000 / fps)
	avih := &chunk{id: "avih"}
	// MainAVIHeader: µs per frame, max bytes/s, padding, flags (HASINDEX),
	// total frames, initial frames, streams, suggested buffer, size, reserved.
	le(avih, usPerFrame, uint32(maxSize*fps), uint32(0), uint32(0x10), n, uint32(0), uint32(1), uint32(maxSize),
		uint32(width), uint32(height), [4]uint32{})
	strh := &chunk{id: "strh"}
	// AVIStreamHeader: type, handler, flags, priority, language, initial
	// frames, scale, rate (rate/scale = fps), start, length, buffer,
	// quality (-1: default), sample size, frame rectangle.
	strh.body.WriteString("vidsMJPG")
	le(strh, uint32(0), uint16(0), uint16(0), uint32(0), uint32(1), uint32(fps), uint32(0), n, uint32(maxSize),
		int32(-1), uint32(0), [4]int16{0, 0, int16(width), int16(height)})
	strf := &chunk{id: "strf"}
	// BITMAPINFOHEADER: size, width, height, planes, bit count, compression, image size, resolution, colours.
	le(strf, uint32(40), int32(width), int32(height), uint16(1), uint16(24))
	strf.body.WriteString("MJPG")
	le(strf, uint32(width*height*3), int32(0), int32(0), uint32(0), uint32(0))
	strl := &chunk{id: "LIST", list: "strl"}
	strl.body.Write(strh.bytes())
	strl.body.Write(strf.bytes())
	hdrl := &chunk{id: "LIST", list: "hdrl"}
	hdrl.body.Write(avih.bytes())
	hdrl.body.Write(strl.bytes())
	movi := &chunk{id: "LIST", list: "movi"}
	idx1 := &chunk{id: "idx1"}
	for _, j := range jpegs {
		off := uint32(4 + movi.body.Len()) // from the "movi" type field
		frame := &chunk{id: "00dc"}
		frame.body.Write(j)
		movi.body.Write(frame.bytes())
		idx1.body.WriteString("00dc")
		le(idx1, uint32(0x10), off, uint32(len(j))) // AVIIF_KEYFRAME
	}
	riff := &chunk{id: "RIFF", list: "AVI "}
	riff.body.Write(hdrl.bytes())
	riff.body.Write(movi.bytes())
	riff.body.Write(idx1.bytes())
	if riff.body.Len() > 1<<31 {
		return fmt.Errorf("%w: %d bytes is past what a RIFF AVI 1.0 file holds", ErrFormat, riff.body.Len())
	}
	_, err := w.Write(riff.bytes())
	return err
}
