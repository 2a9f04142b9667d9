// Package media knows what a file is (SPEC §18): its type sniffed from the
// content, whether an image is sound, a safe name for the workspace, and
// the reference line that names a file in a message's text.
package media

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/gif"  // image.DecodeConfig knows GIF
	_ "image/jpeg" // and JPEG
	_ "image/png"  // and PNG
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	_ "golang.org/x/image/webp" // and WebP
)

// Image types a model may take as image content.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// IsImage reports whether mime is an image type sent to models as image
// content (PNG, JPEG, GIF, WebP).
func IsImage(mime string) bool { return imageTypes[mime] }

// IsPDF reports whether mime is a PDF.
func IsPDF(mime string) bool { return mime == "application/pdf" }

// IsAudio reports whether mime is audio (transcribed when voice is on).
func IsAudio(mime string) bool {
	return strings.HasPrefix(mime, "audio/") || mime == "video/webm" || mime == "application/ogg"
}

// ErrCorrupt: a file says it is an image but does not decode as one.
var ErrCorrupt = errors.New("it is not a readable image (the file is damaged or not what its type says)")

// MaxPixels bounds the images read: one with more pixels (width × height
// from its header) is ErrTooManyPixels and never decoded, so a small file
// that unpacks to a huge image (a decompression bomb) cannot take the
// gateway's memory. 40 megapixels is a large phone photo or a wide
// screenshot. What the decoders may allocate for the images below it is
// bounded by ImageCheck's budget (decodeBudgetBytes).
const MaxPixels = 40_000_000

// ErrTooManyPixels: an image over MaxPixels.
var ErrTooManyPixels = fmt.Errorf("it is an image of more than %d megapixels", MaxPixels/1_000_000)

// Sniff returns a file's type from its first bytes (at least 512, more
// for a JPEG whose header is long), never from its name: the platform's
// claim only breaks a tie for text and audio formats the content does not
// show. An image that does not decode is ErrCorrupt.
func Sniff(head []byte, claimed string) (string, error) {
	t := http.DetectContentType(head)
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = strings.TrimSpace(t[:i])
	}
	switch {
	case bytes.HasPrefix(head, []byte("RIFF")) && len(head) >= 12 && string(head[8:12]) == "WEBP":
		t = "image/webp"
	case len(head) >= 12 && string(head[4:8]) == "ftyp" && (string(head[8:11]) == "M4A" || string(head[8:12]) == "isom" && strings.HasPrefix(claimed, "audio/")):
		t = "audio/mp4"
	case bytes.HasPrefix(head, []byte("OggS")):
		t = "audio/ogg"
	}
	if IsImage(t) {
		cfg, _, err := image.DecodeConfig(bytes.NewReader(head))
		if err != nil {
			return t, ErrCorrupt
		}
		return t, checkSize(cfg)
	}
	claimed = baseType(claimed)
	if t == "text/plain" && strings.HasPrefix(claimed, "text/") && claimed != "text/html" {
		// CSV, Markdown: plain text underneath. HTML is never taken at
		// its word: it is served and shown as text.
		t = claimed
	}
	if t == "application/octet-stream" && strings.HasPrefix(claimed, "audio/") {
		t = claimed
	}
	if t == "text/html" || t == "text/xml" || strings.HasSuffix(t, "+xml") {
		t = "text/plain"
	}
	return t, nil
}

// checkSize vets an image's size from its header.
func checkSize(cfg image.Config) error {
	switch {
	case cfg.Width <= 0 || cfg.Height <= 0:
		return ErrCorrupt
	case int64(cfg.Width)*int64(cfg.Height) > MaxPixels:
		return ErrTooManyPixels
	}
	return nil
}

func baseType(t string) string {
	mt, _, err := mime.ParseMediaType(t)
	if err != nil {
		return ""
	}
	return mt
}

// SafeName makes a file name fit for the workspace's attachments folder:
// the last path element, no control characters, no leading dots, at most
// 120 bytes, and "file" plus an extension for the type when nothing is
// left.
func SafeName(name, mimeType string) string {
	name = strings.ReplaceAll(name, "\\", "/")
	name = path.Base(name)
	var b strings.Builder
	for _, r := range name {
		switch {
		case r == utf8.RuneError, unicode.IsControl(r), r == '/', r == ':', r == '*', r == '?', r == '"', r == '<', r == '>', r == '|', r == '`':
			b.WriteRune('_')
		default:
			b.WriteRune(r)
		}
	}
	name = strings.TrimLeft(strings.TrimSpace(b.String()), ".")
	for len(name) > 120 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" || name == "." {
		name = "file" + Ext(mimeType)
	}
	return name
}

// Ext is a file extension for mimeType ("" when none is known).
func Ext(mimeType string) string {
	switch mimeType {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/gif":
		return ".gif"
	case "image/webp":
		return ".webp"
	case "application/pdf":
		return ".pdf"
	case "audio/ogg":
		return ".ogg"
	case "audio/mpeg":
		return ".mp3"
	case "audio/mp4":
		return ".m4a"
	case "text/plain":
		return ".txt"
	}
	if exts, _ := mime.ExtensionsByType(mimeType); len(exts) > 0 {
		return exts[0]
	}
	return ""
}

// Size renders a byte count as people read it: 1.2 MB, 340 KB, 12 B.
func Size(n int64) string {
	switch {
	case n >= 1_000_000_000:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1_000:
		return fmt.Sprintf("%.0f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// AttachmentsDir is the folder of a conversation workspace that holds the
// files of its messages.
const AttachmentsDir = "attachments"

// RefLine names a file in a message's text:
// [file: attachments/report.pdf · application/pdf · 1.2 MB].
func RefLine(name, mimeType string, size int64) string {
	return fmt.Sprintf("[file: %s/%s · %s · %s]", AttachmentsDir, name, mimeType, Size(size))
}

// NotReadLine tells a person a file was not read.
func NotReadLine(name, reason string) string {
	return fmt.Sprintf("📎 %s was not read: %s.", name, strings.TrimSuffix(reason, "."))
}

// VoiceHint tells a person voice needs transcription configured.
const VoiceHint = "🎙️ Voice messages need attachments.transcription in the config."
