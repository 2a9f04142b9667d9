package providers

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

// TestFilesAsContent: through each official SDK, a user message's image
// reaches a model that takes images as image content with the same bytes
// (Anthropic image block, OpenAI image_url), a PDF as an Anthropic document
// block or an OpenAI file part (not to an OpenAI-compatible server), and neither when the model takes text only — the reference line
// in the text is all it gets.
func TestFilesAsContent(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n fake picture bytes")
	pdf := []byte("%PDF-1.7 fake document")
	blobs := map[string][]byte{"img": png, "doc": pdf}
	open := func(_ context.Context, id string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blobs[id])), nil
	}
	msg := agent.Message{Role: agent.RoleUser, Text: "look\n[file: attachments/a.png · image/png · 20 B]\n[file: attachments/b.pdf · application/pdf · 22 B]",
		Files: []agent.File{{ID: "img", Name: "a.png", MIME: "image/png", Size: int64(len(png))}, {ID: "doc", Name: "b.pdf", MIME: "application/pdf", Size: int64(len(pdf))}}}
	for _, b := range backends {
		for _, images := range []bool{true, false} {
			name := b.name + "/text-only"
			if images {
				name = b.name + "/images"
			}
			t.Run(name, func(t *testing.T) {
				srv := b.fake(t, llmtest.Text("seen"))
				p := newProvider(t, b, srv, Options{})
				req := agent.Request{Model: b.model, Messages: []agent.Message{msg}, Images: images, OpenFile: open}
				if _, err := p.Complete(context.Background(), req); err != nil {
					t.Fatal(err)
				}
				c, _ := srv.Last()
				blocks := c.Blocks()
				var kinds []string
				for _, bl := range blocks {
					kinds = append(kinds, bl.Type+":"+bl.MIME)
					if bl.Type == "image" && !bytes.Equal(bl.Data, png) || bl.Type == "document" && !bytes.Equal(bl.Data, pdf) {
						t.Errorf("%s block with other bytes", bl.Type)
					}
				}
				want := []string{}
				documents := b.api != APIOpenAICompatible // Anthropic documents, OpenAI file parts
				switch {
				case images && documents:
					want = []string{"image:image/png", "document:application/pdf"}
				case images:
					want = []string{"image:image/png"}
				case documents:
					want = []string{"document:application/pdf"}
				}
				if strings.Join(kinds, ",") != strings.Join(want, ",") {
					t.Errorf("blocks %q, want %q", kinds, want)
				}
				if !strings.Contains(c.LastUser(), "[file: attachments/a.png · image/png · 20 B]") {
					t.Errorf("text %q lost the reference line", c.LastUser())
				}
			})
		}
	}
}
