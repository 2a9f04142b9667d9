package admin

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"regexp"
	"strconv"
)

// pageHTML is the whole console: one page with its style and script
// inline, nothing from another origin.
//
//go:embed page.html
var pageHTML []byte

// pageCSP allows the page's own inline script and style by their hashes
// (no 'unsafe-inline'), requests to this origin only, no frames, no forms,
// no plugins: an injected <script> or style attribute does not run.
var pageCSP = func() string {
	hash := func(tag string) string {
		m := regexp.MustCompile(`(?s)<` + tag + `>(.*?)</` + tag + `>`).FindSubmatch(pageHTML)
		if m == nil {
			return "'none'"
		}
		sum := sha256.Sum256(m[1])
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; script-src " + hash("script") + "; style-src " + hash("style") +
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

// page serves GET /admin. The page holds no data (it asks for the token
// itself), so it is served to anyone; the API is what the token guards.
func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Content-Length", strconv.Itoa(len(pageHTML)))
	_, _ = w.Write(pageHTML)
}
