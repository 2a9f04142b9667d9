package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds a small JSON5 parser that keeps where every value and key
// starts. github.com/titanous/json5 decodes the file; this tree exists only so
// that problems can name a line:column and so that decoding can be strict
// (exact key names, every unknown key and wrong type reported at once).

type nodeKind int

const (
	kindObject nodeKind = iota
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (k nodeKind) String() string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "a list"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	default:
		return "null"
	}
}

type node struct {
	kind    nodeKind
	off     int    // byte offset where the value starts
	text    string // string value, or the number's literal text
	members []member
	elems   []*node
}

type member struct {
	key    string
	keyOff int
	val    *node
}

// Pos is a 1-based line and column (in characters) in the config file.
type Pos struct{ Line, Col int }

// lineIndex converts byte offsets to positions.
type lineIndex struct {
	src   []byte
	lines []int // byte offset of each line start
}

func newLineIndex(src []byte) *lineIndex {
	li := &lineIndex{src: src, lines: []int{0}}
	for i, c := range src {
		if c == '\n' {
			li.lines = append(li.lines, i+1)
		}
	}
	return li
}

func (li *lineIndex) pos(off int) Pos {
	if off < 0 {
		off = 0
	}
	if off > len(li.src) {
		off = len(li.src)
	}
	l := sort.Search(len(li.lines), func(i int) bool { return li.lines[i] > off }) - 1
	col := utf8.RuneCount(li.src[li.lines[l]:off]) + 1
	return Pos{Line: l + 1, Col: col}
}

type parseError struct {
	off int
	msg string
}

func (e *parseError) Error() string { return e.msg }

type parser struct {
	src []byte
	i   int
}

// parseJSON5 parses one JSON5 value filling the whole input.
func parseJSON5(src []byte) (*node, error) {
	p := &parser{src: src}
	if strings.HasPrefix(string(src), "\uFEFF") {
		p.i = 3
	}
	if err := p.skip(); err != nil {
		return nil, err
	}
	n, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if err := p.skip(); err != nil {
		return nil, err
	}
	if p.i < len(p.src) {
		return nil, p.errf("unexpected %s after the top-level value", p.describe())
	}
	return n, nil
}

func (p *parser) errf(format string, args ...any) error {
	return &parseError{off: p.i, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) describe() string {
	if p.i >= len(p.src) {
		return "end of file"
	}
	r, _ := utf8.DecodeRune(p.src[p.i:])
	return strconv.QuoteRune(r)
}

// skip passes whitespace and comments.
func (p *parser) skip() error {
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			p.i++
		case c == '/' && p.i+1 < len(p.src) && p.src[p.i+1] == '/':
			for p.i < len(p.src) && p.src[p.i] != '\n' && p.src[p.i] != '\r' {
				p.i++
			}
		case c == '/' && p.i+1 < len(p.src) && p.src[p.i+1] == '*':
			end := strings.Index(string(p.src[p.i+2:]), "*/")
			if end < 0 {
				return p.errf("unterminated /* comment")
			}
			p.i += 2 + end + 2
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(p.src[p.i:])
			if !unicode.IsSpace(r) && r != '\uFEFF' {
				return nil
			}
			p.i += size
		default:
			return nil
		}
	}
	return nil
}

const maxDepth = 200

func (p *parser) value(depth int) (*node, error) {
	if depth > maxDepth {
		return nil, p.errf("nesting deeper than %d levels", maxDepth)
	}
	if p.i >= len(p.src) {
		return nil, p.errf("unexpected end of file, expected a value")
	}
	start := p.i
	c := p.src[p.i]
	switch {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"' || c == '\'':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &node{kind: kindString, off: start, text: s}, nil
	case c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9') || c == 'I' || c == 'N':
		return p.number()
	}
	word := p.ident()
	switch word {
	case "true", "false":
		return &node{kind: kindBool, off: start, text: word}, nil
	case "null":
		return &node{kind: kindNull, off: start}, nil
	}
	p.i = start
	return nil, p.errf("unexpected %s, expected a value (strings need quotes)", p.describe())
}

func (p *parser) object(depth int) (*node, error) {
	n := &node{kind: kindObject, off: p.i}
	p.i++ // {
	for {
		if err := p.skip(); err != nil {
			return nil, err
		}
		if p.i >= len(p.src) {
			return nil, p.errf("unexpected end of file, expected a key or '}'")
		}
		if p.src[p.i] == '}' {
			p.i++
			return n, nil
		}
		keyOff := p.i
		var key string
		switch c := p.src[p.i]; {
		case c == '"' || c == '\'':
			s, err := p.str()
			if err != nil {
				return nil, err
			}
			key = s
		default:
			key = p.ident()
			if key == "" {
				return nil, p.errf("unexpected %s, expected a key", p.describe())
			}
		}
		if err := p.skip(); err != nil {
			return nil, err
		}
		if p.i >= len(p.src) || p.src[p.i] != ':' {
			return nil, p.errf("unexpected %s after key %q, expected ':'", p.describe(), key)
		}
		p.i++
		if err := p.skip(); err != nil {
			return nil, err
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		n.members = append(n.members, member{key: key, keyOff: keyOff, val: v})
		end := p.i
		if err := p.skip(); err != nil {
			return nil, err
		}
		if p.i < len(p.src) && p.src[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.src) && p.src[p.i] == '}' {
			p.i++
			return n, nil
		}
		if next := p.nextKey(); next != "" {
			// Another key follows: the comma between them is missing. Point
			// at where it belongs, not at the next key.
			return nil, &parseError{off: end, msg: fmt.Sprintf("missing comma after the value of %q? (before the key %q)", key, next)}
		}
		return nil, p.errf("unexpected %s, expected ',' or '}'", p.describe())
	}
}

func (p *parser) array(depth int) (*node, error) {
	n := &node{kind: kindArray, off: p.i}
	p.i++ // [
	for {
		if err := p.skip(); err != nil {
			return nil, err
		}
		if p.i >= len(p.src) {
			return nil, p.errf("unexpected end of file, expected a value or ']'")
		}
		if p.src[p.i] == ']' {
			p.i++
			return n, nil
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		n.elems = append(n.elems, v)
		end := p.i
		if err := p.skip(); err != nil {
			return nil, err
		}
		if p.i < len(p.src) && p.src[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.src) && p.src[p.i] == ']' {
			p.i++
			return n, nil
		}
		if p.i < len(p.src) && strings.IndexByte(`{["'`, p.src[p.i]) >= 0 {
			return nil, &parseError{off: end, msg: fmt.Sprintf("missing comma after element %d of the array?", len(n.elems))}
		}
		return nil, p.errf("unexpected %s, expected ',' or ']'", p.describe())
	}
}

// nextKey returns the key that starts at the current offset followed by
// ':' ("" when there is none), without moving.
func (p *parser) nextKey() string {
	if p.i >= len(p.src) {
		return ""
	}
	start := p.i
	defer func() { p.i = start }()
	var key string
	if c := p.src[p.i]; c == '"' || c == '\'' {
		s, err := p.str()
		if err != nil {
			return ""
		}
		key = s
	} else if key = p.ident(); key == "" {
		return ""
	}
	if p.skip() != nil || p.i >= len(p.src) || p.src[p.i] != ':' {
		return ""
	}
	return key
}

// ident reads an unquoted identifier (ASCII letters, digits, _ and $, and
// other Unicode letters), possibly empty.
func (p *parser) ident() string {
	start := p.i
	for p.i < len(p.src) {
		r, size := utf8.DecodeRune(p.src[p.i:])
		ok := r == '_' || r == '$' || unicode.IsLetter(r) || (p.i > start && (unicode.IsDigit(r) || r == '\u200C' || r == '\u200D'))
		if !ok {
			break
		}
		p.i += size
	}
	return string(p.src[start:p.i])
}

func (p *parser) number() (*node, error) {
	start := p.i
	for p.i < len(p.src) {
		c := p.src[p.i]
		if c == '+' || c == '-' || c == '.' || c == 'x' || c == 'X' ||
			(c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
			strings.ContainsRune("InfityNa", rune(c)) {
			p.i++
			continue
		}
		break
	}
	text := string(p.src[start:p.i])
	if _, ok := parseNumber(text); !ok {
		p.i = start
		return nil, p.errf("invalid number %q", text)
	}
	return &node{kind: kindNumber, off: start, text: text}, nil
}

// parseNumber parses a JSON5 number literal.
func parseNumber(text string) (float64, bool) {
	s := text
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	var f float64
	switch {
	case s == "Infinity":
		f = math.Inf(1)
	case s == "NaN":
		f = math.NaN()
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		u, err := strconv.ParseUint(s[2:], 16, 64)
		if err != nil || strings.ContainsAny(s[2:], "+-") {
			return 0, false
		}
		f = float64(u)
	default:
		if s == "" || strings.ContainsAny(s, "xXInfityNa_") || strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
			return 0, false
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, false
		}
		f = v
	}
	if neg {
		f = -f
	}
	return f, true
}

func (p *parser) str() (string, error) {
	quote := p.src[p.i]
	start := p.i
	p.i++
	var b strings.Builder
	for {
		if p.i >= len(p.src) {
			p.i = start
			return "", p.errf("unterminated string")
		}
		c := p.src[p.i]
		switch {
		case c == quote:
			p.i++
			return b.String(), nil
		case c == '\n' || c == '\r':
			return "", p.errf("line break inside a string (end the line with \\ to continue it)")
		case c == '\\':
			p.i++
			if p.i >= len(p.src) {
				continue
			}
			e := p.src[p.i]
			p.i++
			switch e {
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'v':
				b.WriteByte('\v')
			case '0':
				b.WriteByte(0)
			case '\n':
			case '\r':
				if p.i < len(p.src) && p.src[p.i] == '\n' {
					p.i++
				}
			case 'x':
				if p.i+2 > len(p.src) {
					return "", p.errf("bad \\x escape")
				}
				v, err := strconv.ParseUint(string(p.src[p.i:p.i+2]), 16, 8)
				if err != nil {
					return "", p.errf("bad \\x escape")
				}
				b.WriteRune(rune(v))
				p.i += 2
			case 'u':
				r, ok := p.u4()
				if !ok {
					return "", p.errf("bad \\u escape")
				}
				if utf16.IsSurrogate(r) && p.i+1 < len(p.src) && p.src[p.i] == '\\' && p.src[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if r2, ok := p.u4(); ok {
						r = utf16.DecodeRune(r, r2)
					} else {
						p.i = save
					}
				}
				b.WriteRune(r)
			default:
				p.i--
				r, size := utf8.DecodeRune(p.src[p.i:])
				b.WriteRune(r)
				p.i += size
			}
		default:
			r, size := utf8.DecodeRune(p.src[p.i:])
			b.WriteRune(r)
			p.i += size
		}
	}
}

func (p *parser) u4() (rune, bool) {
	if p.i+4 > len(p.src) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.src[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(v), true
}
