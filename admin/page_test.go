package admin

import (
	"crypto/sha256"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
)

// The CSP names the page's inline script and style by their hashes; a
// wrong hash is a console whose script the browser refuses to run.
func TestPageCSPHashesInlineScriptAndStyle(t *testing.T) {
	csp := pageCSP()
	for _, tag := range []string{"script", "style"} {
		m := regexp.MustCompile(`(?s)<` + tag + `>(.*?)</` + tag + `>`).FindSubmatch(pageHTML)
		if m == nil {
			t.Fatalf("page.html has no <%s>", tag)
		}
		sum := sha256.Sum256(m[1])
		want := tag + "-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
}
