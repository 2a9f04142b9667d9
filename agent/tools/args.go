package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/heraldhq/herald/agent"
)

// field describes one argument of a tool for decoding and for its schema.
type field struct {
	name     string
	kind     string // string|integer|boolean
	required bool
	desc     string
}

// schemas caches schema's renderings by their fields: a tool's Spec is
// asked for every run's registry and every model call, and marshalling
// the same few schemas again was 8 % of a sub-agent run's CPU
// (BenchmarkRunLifecycle). The distinct field sets are the built-in
// tools' times the descriptions a config gives them: a handful.
var schemas sync.Map // fieldsKey → json.RawMessage

// schema renders the JSON Schema object for fields. The result is shared:
// callers must not modify it.
func schema(fields ...field) json.RawMessage {
	var k strings.Builder
	for _, f := range fields {
		k.WriteString(f.name)
		k.WriteByte(0)
		k.WriteString(f.kind)
		k.WriteByte(0)
		k.WriteString(f.desc)
		if f.required {
			k.WriteByte(1)
		}
		k.WriteByte(0)
	}
	key := k.String()
	if b, ok := schemas.Load(key); ok {
		return b.(json.RawMessage)
	}
	b := renderSchema(fields)
	schemas.Store(key, b)
	return b
}

func renderSchema(fields []field) json.RawMessage {
	props := make(map[string]any, len(fields))
	required := []string{}
	for _, f := range fields {
		props[f.name] = map[string]any{"type": f.kind, "description": f.desc}
		if f.required {
			required = append(required, f.name)
		}
	}
	return agent.ObjectSchema(props, required...)
}

// args is a decoded argument object.
type args struct {
	tool string
	m    map[string]json.RawMessage
}

// decodeArgs parses raw as a JSON object, checks that every required field is
// present and that no unknown field is given. Errors name the tool, the field
// and what is expected, so the model can correct its call.
func decodeArgs(tool string, raw json.RawMessage, fields ...field) (args, error) {
	a := args{tool: tool, m: map[string]json.RawMessage{}}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) != 0 && !bytes.Equal(trimmed, []byte("null")) {
		if err := json.Unmarshal(trimmed, &a.m); err != nil {
			return a, fmt.Errorf("%s: %w: arguments must be a JSON object like %s (%v)",
				tool, ErrBadArguments, example(fields), err)
		}
	}
	known := make(map[string]bool, len(fields))
	for _, f := range fields {
		known[f.name] = true
		if v, ok := a.m[f.name]; f.required && (!ok || isNull(v)) {
			return a, fmt.Errorf("%s: %w: missing required field %q (%s); expected %s",
				tool, ErrBadArguments, f.name, f.kind, example(fields))
		}
	}
	var unknown []string
	for k := range a.m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return a, fmt.Errorf("%s: %w: unknown field(s) %s; accepted fields are %s",
			tool, ErrBadArguments, strings.Join(quoteAll(unknown), ", "), fieldList(fields))
	}
	return a, nil
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// str returns the string field name, or "" when absent.
func (a args) str(name string) (string, error) {
	v, ok := a.m[name]
	if !ok || isNull(v) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", a.typeErr(name, "a string", v)
	}
	return s, nil
}

// integer returns the integer field name, or def when absent. It accepts
// integral numbers (3, 3.0) and numeric strings ("3").
func (a args) integer(name string, def int64) (int64, error) {
	v, ok := a.m[name]
	if !ok || isNull(v) {
		return def, nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return 0, a.typeErr(name, "an integer", v)
		}
		n, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if perr != nil {
			return 0, a.typeErr(name, "an integer", v)
		}
		return n, nil
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, a.typeErr(name, "an integer", v)
	}
	return int64(f), nil
}

// boolean returns the boolean field name, or false when absent. It accepts
// true/false and the strings "true"/"false".
func (a args) boolean(name string) (bool, error) {
	v, ok := a.m[name]
	if !ok || isNull(v) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err == nil {
		return b, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if b, err := strconv.ParseBool(strings.TrimSpace(s)); err == nil {
			return b, nil
		}
	}
	return false, a.typeErr(name, "true or false", v)
}

func (a args) typeErr(name, want string, got json.RawMessage) error {
	g := string(bytes.TrimSpace(got))
	if len(g) > 40 {
		g = g[:40] + "…"
	}
	return fmt.Errorf("%s: %w: field %q must be %s, got %s", a.tool, ErrBadArguments, name, want, g)
}

// example renders a short example argument object for error messages.
func example(fields []field) string {
	parts := make([]string, 0, len(fields))
	note := ""
	for _, f := range fields {
		v := map[string]string{"string": `"…"`, "integer": "0", "boolean": "false"}[f.kind]
		opt := ""
		if !f.required {
			opt, note = "?", " (? = optional)"
		}
		parts = append(parts, fmt.Sprintf("%q%s: %s", f.name, opt, v))
	}
	return "{" + strings.Join(parts, ", ") + "}" + note
}

func fieldList(fields []field) string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return strings.Join(quoteAll(names), ", ")
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// result is v as the tool's JSON result.
func result(tool string, v any) (string, error) { return agent.JSONResult(tool, v) }
