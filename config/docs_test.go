package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// configKeys returns every JSON key name the config structs accept, with
// the dotted path of its first occurrence (maps as <key>, lists as []).
func configKeys() map[string]string {
	keys := map[string]string{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Map:
			walk(t.Elem(), path+".<key>")
			return
		case reflect.Slice:
			walk(t.Elem(), path+"[]")
			return
		case reflect.Struct:
		default:
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" { // embedded: its keys are this object's
				walk(f.Type, path)
				continue
			}
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			p := strings.TrimPrefix(path+"."+name, ".")
			if _, ok := keys[name]; !ok {
				keys[name] = p
			}
			walk(f.Type, p)
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	// Each registered channel's section (registry_test.go imports them).
	for _, name := range RegisteredChannels() {
		o, _ := newChannelOptions(name)
		walk(reflect.TypeOf(o), "channels."+name)
	}
	return keys
}

// TestConfigurationDocMatchesStructs keeps docs/configuration.md true: every
// key the config accepts is documented there, and every key its tables
// document is one the config accepts.
func TestConfigurationDocMatchesStructs(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	keys := configKeys()
	for name, path := range keys {
		// As a table key (`name`), or at the end of a documented path
		// (`….name`, `….name[]…`).
		re := regexp.MustCompile("`[^`\n]*\\b" + regexp.QuoteMeta(name) + "\\b[^`\n]*`")
		if !re.MatchString(doc) {
			t.Errorf("config key %s (%s) is not documented in docs/configuration.md", name, path)
		}
	}
	// The first column of every table row under "## Keys" names keys.
	_, keysPart, _ := strings.Cut(doc, "\n## Keys\n")
	token := regexp.MustCompile("`([^`]+)`")
	ident := regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)
	for _, line := range strings.Split(keysPart, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range token.FindAllStringSubmatch(first, -1) {
			// Drop placeholders (<id>, <group>) and quoted map keys.
			path := regexp.MustCompile(`<[^>]*>|\[[^\]]*\]|"[^"]*"`).ReplaceAllString(m[1], "")
			for _, id := range ident.FindAllString(path, -1) {
				if _, ok := keys[id]; !ok {
					t.Errorf("docs/configuration.md documents %q (in %s), which is not a config key", id, strings.TrimSpace(first))
				}
			}
		}
	}
}
