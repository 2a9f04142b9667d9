package providers

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/media"
)

// fileReadTimeout bounds reading one file a request sends as content.
const fileReadTimeout = 30 * time.Second

// maxContentBytes is the largest file sent as content; a larger one goes
// as its reference line only (providers refuse big images anyway).
const maxContentBytes = 20 << 20

// anthropicMaxImage is the Messages API's limit per image: a larger one
// would fail the whole request, so it goes as its reference line.
const anthropicMaxImage = 5_000_000

// asContent says how a file on a user message goes to the model: "image",
// "pdf" (documentOK: the API takes PDF documents), or "" — its reference
// line in the text only. maxImage bounds an image (0 = maxContentBytes).
func asContent(req agent.Request, f agent.File, documentOK bool, maxImage int64) string {
	if req.OpenFile == nil || f.Size > maxContentBytes {
		return ""
	}
	switch {
	case req.Images && media.IsImage(f.MIME) && (maxImage == 0 || f.Size <= maxImage):
		return "image"
	case documentOK && media.IsPDF(f.MIME):
		return "pdf"
	}
	return ""
}

// fileBase64 reads a stored file straight into its base64 text: the bytes
// are held once, as the request needs them.
func fileBase64(req agent.Request, f agent.File) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fileReadTimeout)
	defer cancel()
	rc, err := req.OpenFile(ctx, f.ID)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name, err)
	}
	defer rc.Close()
	var b strings.Builder
	b.Grow(int(base64.StdEncoding.EncodedLen(int(f.Size))))
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	if _, err := io.Copy(enc, io.LimitReader(rc, maxContentBytes)); err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name, err)
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}
