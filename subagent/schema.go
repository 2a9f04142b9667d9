package subagent

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// resolveSchema checks a sessions_spawn outputSchema (SPEC §23): a JSON
// Schema object that github.com/google/jsonschema-go can resolve with no
// loader (a remote $ref is refused, nothing is fetched).
// It is first validated against the draft 2020-12 meta-schema (the
// library checks only a schema's structure: {"type":"nope"} would pass).
func resolveSchema(raw []byte) (*jsonschema.Resolved, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("it must be a JSON Schema object")
	}
	var instance any
	if err := json.Unmarshal(raw, &instance); err != nil {
		return nil, err
	}
	meta, err := metaSchema()
	if err != nil {
		return nil, err
	}
	if err := meta.Validate(instance); err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

// metaSchemaFiles are the JSON Schema draft 2020-12 meta-schemas, as
// github.com/google/jsonschema-go v0.4.2 ships them for its tests.
//
//go:embed metaschema/draft2020-12
var metaSchemaFiles embed.FS

const metaSchemaBase = "https://json-schema.org/draft/2020-12/"

// metaSchema is the draft 2020-12 meta-schema, resolved once from the
// embedded files (nothing is fetched).
var metaSchema = sync.OnceValues(func() (*jsonschema.Resolved, error) {
	load := func(name string) (*jsonschema.Schema, error) {
		data, err := metaSchemaFiles.ReadFile("metaschema/draft2020-12/" + name + ".json")
		if err != nil {
			return nil, err
		}
		var s jsonschema.Schema
		return &s, json.Unmarshal(data, &s)
	}
	root, err := load("schema")
	if err != nil {
		return nil, err
	}
	return root.Resolve(&jsonschema.ResolveOptions{Loader: func(u *url.URL) (*jsonschema.Schema, error) {
		name, ok := strings.CutPrefix(u.String(), metaSchemaBase)
		if !ok {
			return nil, fmt.Errorf("no meta-schema %s", u)
		}
		return load(name)
	}})
})

// schemaPrompt is the announce step's prompt for a run with an
// outputSchema.
func schemaPrompt(schema string) string {
	return announcePromptStart + " Reply with one JSON value, and nothing else (bare or in one ```json fence), that matches this JSON Schema:\n" + schema
}

// schemaCorrection is the one correction turn's prompt.
func schemaCorrection(err error) string {
	return "That output does not match the schema: " + err.Error() + "\nReply again with only one JSON value that matches it."
}

// checkOutput takes the JSON value of an announce reply (bare or in one
// ```json fence) and validates it against schema; it returns the value as
// compact JSON.
func checkOutput(schema, reply string) (string, error) {
	rs, err := resolveSchema([]byte(schema))
	if err != nil {
		return "", fmt.Errorf("outputSchema: %w", err)
	}
	text := strings.TrimSpace(reply)
	if body, ok := strings.CutPrefix(text, "```json"); ok {
		if body, ok = strings.CutSuffix(strings.TrimSpace(body), "```"); !ok || strings.Contains(body, "```") {
			return "", errors.New("the reply is not one ```json fence")
		}
		text = body
	}
	dec := json.NewDecoder(strings.NewReader(text))
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("the reply is not JSON: %w", err)
	}
	if dec.More() {
		return "", errors.New("the reply holds more than one JSON value")
	}
	if err := rs.Validate(v); err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(text)); err != nil {
		return "", err
	}
	return b.String(), nil
}

// fencedJSON is an output as the chat announce shows it under Result:.
func fencedJSON(output string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(output), "", "  ") != nil {
		return "```json\n" + output + "\n```"
	}
	return "```json\n" + b.String() + "\n```"
}
