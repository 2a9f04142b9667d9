package media

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"io"
	"sync"

	"golang.org/x/sync/semaphore"
)

// headLen is how much of a file ImageCheck reads for the image's header,
// as much as the store gives Sniff.
const headLen = 64 << 10

// decodeBudgetBytes bounds the memory the whole-image checks take at once,
// however many images arrive together; decodeCost estimates an image's
// share from its header. A check that does not find its share free does
// not wait for it: the image keeps the header check alone (as sound as a
// header can say). Waiting would hold its download up for as long as the
// others' downloads take (a check holds its share while its bytes stream
// in), past the download's deadline, with the channel's receive loop
// behind it.
const decodeBudgetBytes = 256 << 20

var decodeBudget = semaphore.NewWeighted(decodeBudgetBytes)

// ImageCheck decodes a whole image as its bytes stream past (written to
// it, e.g. through io.TeeReader on the way into the store), so a truncated
// or damaged image whose header is sound is found before it goes to a
// model. Bytes that are not a PNG, JPEG, GIF or WebP image are let pass.
// An image over MaxPixels is never decoded. Write never fails; Close
// returns the verdict. Close must be called (it ends the decoding
// goroutine), and may be called more than once.
type ImageCheck struct {
	pw      *io.PipeWriter
	done    chan struct{}
	err     error // set before done is closed
	closing sync.Once
}

// NewImageCheck starts a check; write the file's bytes to it, then Close.
func NewImageCheck() *ImageCheck {
	pr, pw := io.Pipe()
	c := &ImageCheck{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = decodeWhole(pr)
		// Take the rest (trailing bytes, or all of a file that is no
		// image), so that writers never block.
		_, _ = io.Copy(io.Discard, pr)
	}()
	return c
}

// Write hands the next bytes of the file to the decoder.
func (c *ImageCheck) Write(p []byte) (int, error) {
	_, _ = c.pw.Write(p) // fails only after Close: the verdict is in
	return len(p), nil
}

// Close ends the file and returns the verdict: nil (sound, or no image),
// ErrCorrupt or ErrTooManyPixels.
func (c *ImageCheck) Close() error {
	c.closing.Do(func() { _ = c.pw.Close() })
	<-c.done
	return c.err
}

// Sniff is media.Sniff, with the whole image checked when the head shows
// one: call it once every byte was written (the store's sniff callback
// runs after the copy).
func (c *ImageCheck) Sniff(head []byte, claimed string) (string, error) {
	t, err := Sniff(head, claimed)
	if err != nil || !IsImage(t) {
		return t, err
	}
	return t, c.Close()
}

// decodeWhole reads an image's header from r, vets its size, then decodes
// all of it.
func decodeWhole(r io.Reader) error {
	head := make([]byte, headLen)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil
	}
	head = head[:n]
	cfg, format, err := image.DecodeConfig(bytes.NewReader(head))
	if err != nil {
		return nil // no image (or a header Sniff refuses): Sniff's call
	}
	switch format {
	case "png", "jpeg", "gif", "webp":
	default:
		return nil
	}
	if err := checkSize(cfg); err != nil {
		return err
	}
	cost := decodeCost(format, cfg, head)
	if !decodeBudget.TryAcquire(cost) {
		return nil // the header check alone: see decodeBudgetBytes
	}
	defer decodeBudget.Release(cost)
	if _, _, err := image.Decode(io.MultiReader(bytes.NewReader(head), r)); err != nil {
		return ErrCorrupt
	}
	return nil
}

// decodeCost estimates the bytes the standard decoders allocate for an
// image, from its header: the image itself (a byte a colour component, two
// for 16-bit PNGs; four a pixel for GIF and WebP) and, for a progressive
// JPEG, a 64-coefficient block of int32s per 8×8 block per component, four
// times more; an interlaced PNG is decoded pass by pass, then merged.
func decodeCost(format string, cfg image.Config, head []byte) int64 {
	px := int64(cfg.Width) * int64(cfg.Height)
	switch format {
	case "jpeg":
		comps, progressive := jpegLayout(head)
		if progressive {
			return px * comps * 5
		}
		return px * comps
	case "png":
		bpp := int64(4)
		switch cfg.ColorModel {
		case color.RGBA64Model, color.NRGBA64Model, color.Gray16Model:
			bpp = 8
		}
		if len(head) > 28 && head[28] == 1 { // IHDR's interlace method: Adam7
			bpp *= 2
		}
		return px * bpp
	}
	return px * 4
}

// jpegLayout reads a JPEG's frame header from its first bytes: the number
// of colour components and whether it is progressive. Without a frame
// header in head it assumes the costlier: three components, progressive.
func jpegLayout(head []byte) (comps int64, progressive bool) {
	for i := 2; i+4 <= len(head); { // past SOI
		if head[i] != 0xFF {
			break
		}
		m := head[i+1]
		switch {
		case m == 0xFF: // a fill byte
			i++
			continue
		case m == 0x01 || m >= 0xD0 && m <= 0xD8: // markers without a length
			i += 2
			continue
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC: // SOFn
			if i+9 >= len(head) {
				return 3, true
			}
			return max(int64(head[i+9]), 1), m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE
		}
		i += 2 + (int(head[i+2])<<8 | int(head[i+3]))
	}
	return 3, true
}
