package channels

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
)

// Visible returns s with every character that is invisible or reorders the
// text around it written as a JSON-style escape (`\u202e`; a pair of
// surrogate escapes above U+FFFF): format characters (bidi embeddings,
// overrides and isolates, zero-width spaces and joiners, the BOM, tag
// characters, the soft hyphen), controls other than newline and tab, line
// and paragraph separators, and invisible fillers. Inside a JSON string such
// an escape means the same character, so the result shows exactly what a
// tool call's arguments say (SPEC §17: an approval request must not be
// disguised); every other character is kept.
func Visible(s string) string {
	if strings.IndexFunc(s, hidden) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !hidden(r) {
			b.WriteRune(r)
			continue
		}
		if r > 0xFFFF {
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, hi, lo)
			continue
		}
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// hidden reports whether r shows as nothing (or moves the text around it).
func hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r == utf8RuneError:
		return true
	case unicode.IsControl(r), unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs):
		return true
	case r == 0x034F, r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, r == 0x2800,
		r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF: // joiner, fillers, blank braille, variation selectors
		return true
	}
	return false
}

// utf8RuneError stands for bytes that are not UTF-8 (shown as \ufffd).
const utf8RuneError = '\uFFFD'
