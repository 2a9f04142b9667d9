package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"runtime"
	"testing"
	"time"
)

func testImage() image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 96, 64))
	for x := range 96 {
		for y := range 64 {
			img.Set(x, y, color.RGBA{R: uint8(x * 2), G: uint8(y * 3), B: uint8(x ^ y), A: 255})
		}
	}
	return img
}

func encoded(t *testing.T, format string) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&b, testImage())
	case "jpeg":
		err = jpeg.Encode(&b, testImage(), &jpeg.Options{Quality: 90})
	case "gif":
		err = gif.Encode(&b, testImage(), nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// check streams data through an ImageCheck in small writes, as a download
// does, and returns Sniff's answer on the first 64 KiB.
func check(data []byte, claimed string) (string, error) {
	c := NewImageCheck()
	defer c.Close()
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1000)
		c.Write(rest[:n])
		rest = rest[n:]
	}
	return c.Sniff(data[:min(len(data), 64<<10)], claimed)
}

// TestSniffGoesByContent: the type comes from the bytes, never from the
// name or the platform's claim; HTML and XML are never served as such.
func TestSniffGoesByContent(t *testing.T) {
	pngData := encoded(t, "png")
	for _, tc := range []struct {
		name, claimed string
		data          []byte
		want          string
	}{
		{"a PNG claimed as text", "text/plain", pngData, "image/png"},
		{"a JPEG claimed as a PDF", "application/pdf", encoded(t, "jpeg"), "image/jpeg"},
		{"a GIF with no claim", "", encoded(t, "gif"), "image/gif"},
		{"text claimed as a PNG", "image/png", []byte("just some words, not a picture at all"), "text/plain"},
		{"HTML claimed as HTML", "text/html", []byte("<!DOCTYPE html><html><body><script>alert(1)</script></body></html>"), "text/plain"},
		{"HTML claimed as a PNG", "image/png", []byte("<html><body><img src=x onerror=alert(1)></body></html>"), "text/plain"},
		{"SVG claimed as an image", "image/svg+xml", []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`), "text/plain"},
		{"CSV claimed as CSV", "text/csv", []byte("a,b\n1,2\n"), "text/csv"},
		{"a PDF claimed as octet-stream", "application/octet-stream", []byte("%PDF-1.7\n1 0 obj\n<<>>\nendobj\n"), "application/pdf"},
		{"an OGG voice note", "audio/ogg", append([]byte("OggS"), make([]byte, 60)...), "audio/ogg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := check(tc.data, tc.claimed)
			if err != nil || got != tc.want {
				t.Errorf("Sniff = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestDamagedImagesAreNotRead: an image whose header does not decode, and
// one cut short or damaged after a sound header, are ErrCorrupt; the sound
// image is not.
func TestDamagedImagesAreNotRead(t *testing.T) {
	for _, format := range []string{"png", "jpeg", "gif"} {
		whole := encoded(t, format)
		damaged := bytes.Clone(whole)
		for i := len(damaged) / 2; i < len(damaged)-4; i++ {
			damaged[i] = 0xA5
		}
		for _, tc := range []struct {
			name string
			data []byte
			want error
		}{
			{"whole", whole, nil},
			{"truncated to three quarters", whole[:len(whole)*3/4], ErrCorrupt},
			{"truncated to half", whole[:len(whole)/2], ErrCorrupt},
			{"overwritten in its second half", damaged, ErrCorrupt},
			{"only its signature", whole[:8], ErrCorrupt},
		} {
			t.Run(format+" "+tc.name, func(t *testing.T) {
				if _, err := check(tc.data, "image/"+format); !errors.Is(err, tc.want) {
					t.Errorf("check = %v, want %v", err, tc.want)
				}
			})
		}
	}
}

// bombPNG is a PNG whose header says width × height pixels, followed by a
// tiny compressed stream of zeros: a few hundred bytes that would unpack
// to gigabytes.
func bombPNG(t *testing.T, width, height uint32) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		crc := crc32.NewIEEE()
		io.WriteString(crc, typ)
		crc.Write(data)
		b.WriteString(typ)
		b.Write(data)
		binary.Write(&b, binary.BigEndian, crc.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], width)
	binary.BigEndian.PutUint32(ihdr[4:], height)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	chunk("IHDR", ihdr)
	chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01}) // an empty zlib stream
	chunk("IEND", nil)
	return b.Bytes()
}

// TestDecompressionBombIsNotDecoded: an image whose header claims more
// than MaxPixels is refused from its header, without the gigabytes a
// decoder would allocate for it.
func TestDecompressionBombIsNotDecoded(t *testing.T) {
	bomb := bombPNG(t, 50_000, 50_000) // 2.5 gigapixels, 10 GB as RGBA
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := check(bomb, "image/png")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooManyPixels) {
		t.Errorf("check = %v, want ErrTooManyPixels", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("checking the bomb allocated %d MB", grew>>20)
	}
	// Within the limit but not what its header says: corrupt, not a panic.
	if _, err := check(bombPNG(t, 2000, 2000), "image/png"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("check of a 2000×2000 PNG with no pixel data = %v, want ErrCorrupt", err)
	}
}

// TestImageCheckWithoutAnImage: bytes that are no image pass the check
// whole, and Close may be called again.
func TestImageCheckWithoutAnImage(t *testing.T) {
	c := NewImageCheck()
	big := bytes.Repeat([]byte("plain text line\n"), 20_000) // more than the header it reads
	if n, err := c.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestNotReadLine(t *testing.T) {
	if got, want := NotReadLine("chart.png", ErrCorrupt.Error()), "📎 chart.png was not read: it is not a readable image (the file is damaged or not what its type says)."; got != want {
		t.Errorf("NotReadLine = %q, want %q", got, want)
	}
}

// TestDecodeCostFromHeader: the memory a whole-image check reserves is
// estimated from the header — a progressive JPEG costs five times a
// baseline one of the same size, a 16-bit or interlaced PNG twice an
// 8-bit one.
func TestDecodeCostFromHeader(t *testing.T) {
	cost := func(data []byte) int64 {
		t.Helper()
		cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return decodeCost(format, cfg, data[:min(len(data), headLen)])
	}
	const px = 96 * 64
	baseline := encoded(t, "jpeg")
	if got := cost(baseline); got != 3*px {
		t.Errorf("baseline colour JPEG: cost %d, want %d", got, 3*px)
	}
	var g bytes.Buffer
	gray := image.NewGray(image.Rect(0, 0, 96, 64))
	if err := jpeg.Encode(&g, gray, nil); err != nil {
		t.Fatal(err)
	}
	if got := cost(g.Bytes()); got != px {
		t.Errorf("baseline grey JPEG: cost %d, want %d", got, px)
	}
	// The same frame header marked progressive (SOF2): Go encodes only
	// baseline, and only the header is read here.
	progressive := bytes.Clone(baseline)
	sof := bytes.Index(progressive, []byte{0xFF, 0xC0})
	if sof < 0 {
		t.Fatal("no SOF0 in the encoded JPEG")
	}
	progressive[sof+1] = 0xC2
	if got := cost(progressive); got != 15*px {
		t.Errorf("progressive colour JPEG: cost %d, want %d", got, 15*px)
	}
	if got := cost(encoded(t, "png")); got != 4*px {
		t.Errorf("8-bit PNG: cost %d, want %d", got, 4*px)
	}
	var deep bytes.Buffer
	if err := png.Encode(&deep, image.NewNRGBA64(image.Rect(0, 0, 96, 64))); err != nil {
		t.Fatal(err)
	}
	if got := cost(deep.Bytes()); got != 8*px {
		t.Errorf("16-bit PNG: cost %d, want %d", got, 8*px)
	}
	interlaced := bombPNG(t, 96, 64)
	interlaced[28] = 1 // IHDR's interlace method, then the chunk's CRC again
	binary.BigEndian.PutUint32(interlaced[29:], crc32.ChecksumIEEE(interlaced[12:29]))
	if got := cost(interlaced); got != 8*px {
		t.Errorf("interlaced 8-bit PNG: cost %d, want %d", got, 8*px)
	}
}

// TestCheckNeverWaitsForTheBudget: while other checks hold the whole
// decode budget, an image gets the header check alone at once instead of
// holding its download up; with the budget free it is decoded whole again.
func TestCheckNeverWaitsForTheBudget(t *testing.T) {
	whole := encoded(t, "png")
	truncated := whole[:len(whole)*3/4]
	if !decodeBudget.TryAcquire(decodeBudgetBytes) {
		t.Fatal("the decode budget is in use by another test")
	}
	done := make(chan error, 1)
	go func() {
		_, err := check(truncated, "image/png")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("with the budget taken: check = %v, want nil (the header check alone)", err)
		}
	case <-time.After(30 * time.Second):
		decodeBudget.Release(decodeBudgetBytes)
		t.Fatal("with the budget taken, the check waited for it (the download would be held up)")
	}
	decodeBudget.Release(decodeBudgetBytes)
	if _, err := check(truncated, "image/png"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("with the budget free: check = %v, want ErrCorrupt", err)
	}
}
