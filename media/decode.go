package media

import (
	"bytes"
	"context"
	"errors"
	"image"
	"io"
	"sync"

	"golang.org/x/sync/semaphore"
)

// headLen is how much of a file ImageCheck reads for the image's header,
// as much as the store gives Sniff.
const headLen = 64 << 10

// decodeBudget bounds the pixels being decoded at once to twice
// MaxPixels, so the memory the checks take stays that of two of the
// largest images however many arrive together; a screenshot or a phone
// photo is a small share of it and does not wait for another's download.
var decodeBudget = semaphore.NewWeighted(2 * MaxPixels)

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
	pixels := int64(cfg.Width) * int64(cfg.Height)
	_ = decodeBudget.Acquire(context.Background(), pixels) // never fails without a deadline
	defer decodeBudget.Release(pixels)
	if _, _, err := image.Decode(io.MultiReader(bytes.NewReader(head), r)); err != nil {
		return ErrCorrupt
	}
	return nil
}
