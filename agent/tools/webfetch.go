package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/netguard"
)

// ErrRefused marks a web_fetch the egress policy refused.
var ErrRefused = errors.New("address not allowed")

// WebFetchName is the web_fetch tool's name.
const WebFetchName = "web_fetch"

// Defaults of the web_fetch tool.
const (
	DefaultFetchTimeout  = 20 * time.Second
	DefaultFetchMaxBytes = 1 << 20
)

type webFetch struct {
	client  *http.Client
	timeout time.Duration
	max     int64
}

var webFetchFields = []field{
	{"url", "string", true, "http or https URL to GET"},
	{"maxBytes", "integer", false, "read at most this many bytes of the body (may only lower the configured limit)"},
}

// NewWebFetch returns the web_fetch tool; it uses opts.HTTPClient, or a
// default client when that is nil.
func NewWebFetch(opts Options) agent.Tool {
	o := opts.withDefaults()
	return &webFetch{client: o.HTTPClient, timeout: o.FetchTimeout, max: int64(o.FetchMaxBytes)}
}

func (t *webFetch) Group() string { return agent.GroupWeb }

// Repeatable implements agent.Repeatable: a GET fetched again has no
// effect of its own (SPEC §25).
func (t *webFetch) Repeatable() bool { return true }

func (t *webFetch) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: WebFetchName,
		Description: fmt.Sprintf("Fetch a web page or file with an HTTP GET and return its text. HTML is returned as "+
			"plain text without tags. At most %d bytes are read (truncated is then true) and the request is "+
			"stopped after %d seconds. Non-2xx statuses are returned, not treated as errors; check status.",
			t.max, int(t.timeout/time.Second)),
		Schema: schema(webFetchFields...),
	}
}

type webFetchResult struct {
	URL         string `json:"url"`
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Content     string `json:"content"`
	Truncated   bool   `json:"truncated"`
	Note        string `json:"note,omitempty"`
}

func (t *webFetch) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	a, err := decodeArgs(WebFetchName, raw, webFetchFields...)
	if err != nil {
		return "", err
	}
	rawURL, err := a.str("url")
	if err != nil {
		return "", err
	}
	max, err := a.integer("maxBytes", t.max)
	if err != nil {
		return "", err
	}
	if max <= 0 || max > t.max {
		max = t.max
	}
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return "", fmt.Errorf("%s: %w: %q is not a valid URL: %v", WebFetchName, ErrBadArguments, rawURL, err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		return "", fmt.Errorf("%s: %w: only http and https URLs can be fetched, not %q; give a URL like \"https://example.com/page\"",
			WebFetchName, ErrBadArguments, u.Scheme+":")
	}
	if u.Host == "" {
		return "", fmt.Errorf("%s: %w: URL %q has no host; give a URL like \"https://example.com/page\"", WebFetchName, ErrBadArguments, rawURL)
	}

	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", fmt.Errorf("%s: build request for %s: %w", WebFetchName, u, err)
	}
	req.Header.Set("User-Agent", "Herald web_fetch/1")
	req.Header.Set("Accept", "text/html, text/plain, application/json, text/*;q=0.9, */*;q=0.5")
	resp, err := t.client.Do(req)
	if err != nil {
		if r, ok := netguard.AsRefused(err); ok {
			return "", fmt.Errorf("%s: %w: refused to fetch %s: %v. Agents may not reach loopback, private, link-local "+
				"or other internal addresses (also not through redirects); an operator can allow specific hosts or "+
				"networks with tools.webFetch.allowPrivate; fetch a public URL instead", WebFetchName, ErrRefused, u.Redacted(), r)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", fmt.Errorf("%s: fetch %s: no answer within %s", WebFetchName, u, t.timeout)
		}
		return "", fmt.Errorf("%s: fetch %s: %w", WebFetchName, u, err)
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	truncated := int64(len(body)) > max
	if truncated {
		body = trimPartialRune(body[:max])
	}
	if err != nil {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || len(body) == 0 {
			return "", fmt.Errorf("%s: read body of %s: %w", WebFetchName, u, err)
		}
		truncated = true // the time cap cut the body
	}

	ct := resp.Header.Get("Content-Type")
	res := webFetchResult{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: ct, Truncated: truncated}
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml" || mt == "" && looksLikeHTML(body):
		res.Content = htmlToText(string(body))
	case isTextType(mt) || mt == "" && utf8.Valid(body):
		res.Content = string(body)
	default:
		res.Note = fmt.Sprintf("binary content (%s, %d bytes read) is not shown", mt, len(body))
	}
	return result(WebFetchName, res)
}

func isTextType(mt string) bool {
	return strings.HasPrefix(mt, "text/") ||
		strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") ||
		mt == "application/json" || mt == "application/xml" ||
		mt == "application/javascript" || mt == "application/x-ndjson" || mt == "application/yaml"
}

func looksLikeHTML(b []byte) bool {
	head := strings.ToLower(strings.TrimSpace(string(b[:min(len(b), 512)])))
	return strings.HasPrefix(head, "<!doctype html") || strings.HasPrefix(head, "<html")
}

var (
	reDropBlocks = sync.OnceValue(func() *regexp.Regexp { return dropBlocks("script", "style", "noscript", "template", "svg", "head") })
	reTitle      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?is)<title\b[^>]*>(.*?)</title\s*>`) })
	reBreak      = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)<(br|/?p|/?div|/?li|/?tr|/?h[1-6]|/?ul|/?ol|/?table|/?section|/?article|/?header|/?footer|/?pre|/?blockquote|hr)\b[^>]*>`)
	})
	reTag        = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)<[^>]*>`) })
	reSpaces     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[ \t\r\f\v]+`) })
	reBlankLines = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\n\s*\n+`) })
)

// dropBlocks matches comments and each named element with its content (RE2
// has no back-references, hence one alternative per name).
func dropBlocks(names ...string) *regexp.Regexp {
	alts := []string{`<!--.*?-->`}
	for _, n := range names {
		alts = append(alts, `<`+n+`\b.*?</`+n+`\s*>`)
	}
	return regexp.MustCompile(`(?is)` + strings.Join(alts, "|"))
}

// htmlToText is a simple tag strip: it keeps the title, drops scripts,
// styles and comments, turns block elements into line breaks and decodes
// entities.
func htmlToText(s string) string {
	title := ""
	if m := reTitle().FindStringSubmatch(s); m != nil {
		title = strings.TrimSpace(html.UnescapeString(reTag().ReplaceAllString(m[1], "")))
	}
	s = reDropBlocks().ReplaceAllString(s, " ")
	s = reBreak().ReplaceAllString(s, "\n")
	s = reTag().ReplaceAllString(s, "")
	s = html.UnescapeString(s)
	s = strings.ReplaceAll(s, "\u00a0", " ")
	s = reSpaces().ReplaceAllString(s, " ")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	s = strings.TrimSpace(reBlankLines().ReplaceAllString(strings.Join(lines, "\n"), "\n\n"))
	if title != "" && !strings.HasPrefix(s, title) {
		s = title + "\n\n" + s
	}
	return s
}
