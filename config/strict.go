package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// joinKey appends an object key to a key path: `a.b` for identifier-like
// keys, `a["-100123"]` for the rest.
func joinKey(path, key string) string {
	if isPlainKey(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// joinIndex appends a list index to a key path.
func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func isPlainKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case i > 0 && (r == '-' || (r >= '0' && r <= '9')):
		default:
			return false
		}
	}
	return true
}

// indexPositions records where every key path starts: an object member at
// its key, a list element at its value.
func indexPositions(n *node, path string, li *lineIndex, out map[string]Pos) {
	switch n.kind {
	case kindObject:
		for _, m := range n.members {
			p := joinKey(path, m.key)
			if _, dup := out[p]; !dup {
				out[p] = li.pos(m.keyOff)
			}
			indexPositions(m.val, p, li, out)
		}
	case kindArray:
		for i, e := range n.elems {
			p := joinIndex(path, i)
			out[p] = li.pos(e.off)
			indexPositions(e, p, li, out)
		}
	}
}

// strictChecker compares a parsed tree with the Go type it will decode into
// and reports every unknown key, duplicate key and wrong type.
type strictChecker struct {
	li       *lineIndex
	problems []Problem
}

func (c *strictChecker) add(off int, path, format string, args ...any) {
	p := c.li.pos(off)
	c.problems = append(c.problems, Problem{Path: path, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, args...)})
}

// jsonFields lists a struct's JSON keys, flattening embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func (c *strictChecker) check(n *node, t reflect.Type, path string) {
	if n.kind == kindNull {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == modelSettingType && n.kind == kindString {
		return // a plain "provider/model" reference
	}
	if t == channelsType {
		c.checkChannels(n, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.kind != kindObject && t == modelSettingType {
			c.mismatch(n, path, "a \"provider/model\" string or {primary, fallbacks}")
			return
		}
		if n.kind != kindObject {
			c.mismatch(n, path, "an object")
			return
		}
		fields := jsonFields(t)
		c.eachMember(n, path, func(m member, p string) {
			ft, ok := fields[m.key]
			if !ok {
				c.add(m.keyOff, p, "unknown key %q%s", m.key, suggest(m.key, fields))
				return
			}
			c.check(m.val, ft, p)
		})
	case reflect.Map:
		if n.kind != kindObject {
			c.mismatch(n, path, "an object")
			return
		}
		c.eachMember(n, path, func(m member, p string) { c.check(m.val, t.Elem(), p) })
	case reflect.Slice:
		if n.kind != kindArray {
			c.mismatch(n, path, "a list")
			return
		}
		for i, e := range n.elems {
			c.check(e, t.Elem(), joinIndex(path, i))
		}
	case reflect.String:
		if n.kind != kindString {
			c.mismatch(n, path, "a string")
		}
	case reflect.Bool:
		if n.kind != kindBool {
			c.mismatch(n, path, "true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.kind != kindNumber {
			c.mismatch(n, path, "a whole number")
			return
		}
		f, _ := parseNumber(n.text)
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
			c.add(n.off, path, "expected a whole number, got %s", n.text)
			return
		}
		bits := t.Bits()
		if f >= math.Ldexp(1, bits-1) || f < -math.Ldexp(1, bits-1) {
			c.add(n.off, path, "number %s is out of range", n.text)
		}
	case reflect.Float32, reflect.Float64:
		if n.kind != kindNumber {
			c.mismatch(n, path, "a number")
			return
		}
		if f, _ := parseNumber(n.text); math.IsInf(f, 0) || math.IsNaN(f) {
			c.add(n.off, path, "expected a finite number, got %s", n.text)
		}
	}
}

// eachMember calls f with each member of the object n and its key path,
// in order; a key already seen is reported as a duplicate instead.
func (c *strictChecker) eachMember(n *node, path string, f func(m member, p string)) {
	seen := map[string]bool{}
	for _, m := range n.members {
		p := joinKey(path, m.key)
		if seen[m.key] {
			c.add(m.keyOff, p, "duplicate key %q", m.key)
			continue
		}
		seen[m.key] = true
		f(m, p)
	}
}

func (c *strictChecker) mismatch(n *node, path, want string) {
	got := n.kind.String()
	switch n.kind {
	case kindString:
		got = "the string " + strconv.Quote(n.text)
	case kindNumber, kindBool:
		got += " (" + n.text + ")"
	}
	c.add(n.off, path, "expected %s, got %s", want, got)
}

// suggest proposes the known key closest to a mistyped one.
func suggest(key string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	best, bestD := "", 3
	for _, k := range names {
		if strings.EqualFold(k, key) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
		if len(key) >= 4 && best == "" && strings.HasPrefix(strings.ToLower(k), strings.ToLower(key)) {
			best, bestD = k, 2
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(key)); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
