package web

import (
	"bytes"
	"strings"
	"sync"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
)

// md renders assistant replies as HTML. goldmark without WithUnsafe leaves
// raw HTML out and drops dangerous link targets (javascript:, vbscript:,
// file:, data: other than images), so the page can show the result as HTML.
// Built on first use: goldmark.New sets up every parser and renderer, and
// an idle gateway renders nothing.
var md = sync.OnceValue(func() goldmark.Markdown { return goldmark.New(goldmark.WithExtensions(extension.GFM)) })

// withHTML returns e with HTML set for an assistant reply (Markdown);
// other roles are shown as text.
func withHTML(e Entry) Entry {
	if e.Role != RoleAssistant || e.Text == "" {
		return e
	}
	var buf bytes.Buffer
	if err := md().Convert([]byte(e.Text), &buf); err == nil {
		e.HTML = strings.TrimSpace(buf.String())
	}
	return e
}
