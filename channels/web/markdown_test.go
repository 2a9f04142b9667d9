package web

import (
	"strings"
	"testing"
)

// An assistant reply's Markdown is rendered to HTML without raw HTML or
// dangerous link targets; other roles get no HTML.
func TestMarkdownIsRenderedSafely(t *testing.T) {
	e := withHTML(Entry{Role: RoleAssistant, Text: "**bold** and `code`\n\n```go\nx := 1\n```\n\n" +
		"<script>alert(1)</script><img src=x onerror=alert(1)>\n\n[bad](javascript:alert(1)) [good](https://example.org)"})
	for _, want := range []string{"<strong>bold</strong>", "<code>code</code>", "<pre><code class=\"language-go\">x := 1", `href="https://example.org"`} {
		if !strings.Contains(e.HTML, want) {
			t.Errorf("HTML lacks %s:\n%s", want, e.HTML)
		}
	}
	for _, bad := range []string{"<script", "<img", "onerror", "javascript:"} {
		if strings.Contains(e.HTML, bad) {
			t.Errorf("HTML contains %s:\n%s", bad, e.HTML)
		}
	}
	if u := withHTML(Entry{Role: RoleUser, Text: "**not rendered**"}); u.HTML != "" {
		t.Errorf("a user message got HTML %q", u.HTML)
	}
}
