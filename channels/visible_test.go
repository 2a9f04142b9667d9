package channels_test

import (
	"testing"

	"github.com/heraldhq/herald/channels"
)

// TestVisible: characters that show as nothing or reorder the text are
// written as \u escapes (surrogate pairs above U+FFFF); newlines, tabs and
// ordinary text (emoji, accents, CJK) stay as they are.
func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"rm -rf \u202e/ etc":           `rm -rf \u202e/ etc`,
		"a\u200bb\u200dc\u2066d\ufeff": `a\u200bb\u200dc\u2066d\ufeff`,
		"tag\U000E0041":                `tag\udb40\udc41`,
		"cr\rbell\a":                   `cr\u000dbell\u0007`,
		"line\u2028sep":                `line\u2028sep`,
		"ok: é 中文 🙂\n\tx":              "ok: é 中文 🙂\n\tx",
	} {
		if got := channels.Visible(in); got != want {
			t.Errorf("Visible(%+q) = %+q, want %+q", in, got, want)
		}
	}
}
