package admin

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strconv"
	"sync"
)

// pageHTML is the whole console: one page with its style and script
// inline, nothing from another origin.
//
//go:embed page.html
var pageHTML []byte

// pageCSP allows the page's own inline script and style by their hashes
// (no 'unsafe-inline'), requests to this origin only, no frames, no forms,
// no plugins: an injected <script> or style attribute does not run.
// It is made when the page is first served, not at package init (0.8 ms
// before every start, console or not).
var pageCSP = sync.OnceValue(func() string {
	hash := func(tag string) string {
		_, rest, ok := bytes.Cut(pageHTML, []byte("<"+tag+">"))
		body, _, closed := bytes.Cut(rest, []byte("</"+tag+">"))
		if !ok || !closed {
			return "'none'"
		}
		sum := sha256.Sum256(body)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; script-src " + hash("script") + "; style-src " + hash("style") +
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
})

// page serves GET /admin. The page holds no data (it asks for the token
// itself), so it is served to anyone; the API is what the token guards.
func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", pageCSP())
	h.Set("Content-Length", strconv.Itoa(len(pageHTML)))
	_, _ = w.Write(pageHTML)
}
