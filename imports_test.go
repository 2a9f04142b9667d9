package herald_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestChannelModulesImportedOnlyByRegistry keeps SPEC §21 true: a channel
// module (a package under channels/ that calls channels.Register) is
// imported by no production package but channels/all, so the gateway,
// config and commands know channels only through the registry — and the
// gateway links no platform SDK.
func TestChannelModulesImportedOnlyByRegistry(t *testing.T) {
	const prefix = "github.com/heraldhq/herald/"
	modules := map[string]bool{} // import path of each module package
	dirs, err := os.ReadDir("channels")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		files, _ := filepath.Glob(filepath.Join("channels", d.Name(), "*.go"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && !strings.HasSuffix(f, "_test.go") && strings.Contains(string(b), "channels.Register(") {
				modules[prefix+"channels/"+d.Name()] = true
			}
		}
	}
	if len(modules) < 3 {
		t.Fatalf("found %d channel modules (%v); the test is not looking at the registrations", len(modules), modules)
	}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		af, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		own := prefix + filepath.ToSlash(filepath.Dir(path))
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			for mod := range modules {
				if (p == mod || strings.HasPrefix(p, mod+"/")) && own != mod && !strings.HasPrefix(own, mod+"/") && filepath.ToSlash(path) != "channels/all/all.go" {
					t.Errorf("%s imports %s: only channels/all/all.go may name a channel module", path, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConsoleIsAPeerOfTheWebChat keeps the operator's console (SPEC §27)
// where ARCHITECTURE puts it: package admin imports neither the gateway
// nor the web chat; it reaches the gateway through admin.Live only.
func TestConsoleIsAPeerOfTheWebChat(t *testing.T) {
	files, err := filepath.Glob("admin/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("admin sources: %v %v", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p == "github.com/heraldhq/herald/gateway" || strings.HasPrefix(p, "github.com/heraldhq/herald/channels/web") {
				t.Errorf("%s imports %s: the console must not", f, p)
			}
		}
	}
}
