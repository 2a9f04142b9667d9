package herald_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs: every package has exactly one package doc comment, in
// the form "Package <name> …" ("Command <name> …" for a main package), so
// go doc shows one true description (after tailscale's pkgdoc_test.go).
func TestPackageDocs(t *testing.T) {
	dirs := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, files := range dirs {
		var docs []string
		name := ""
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				t.Fatal(err)
			}
			name = af.Name.Name
			if af.Doc != nil {
				docs = append(docs, f+": "+strings.SplitN(af.Doc.Text(), "\n", 2)[0])
			}
		}
		switch {
		case len(docs) == 0:
			t.Errorf("%s: package %s has no package doc comment", dir, name)
		case len(docs) > 1:
			t.Errorf("%s: package %s has %d package doc comments, want one:\n%s", dir, name, len(docs), strings.Join(docs, "\n"))
		default:
			want := "Package " + name + " "
			if name == "main" {
				want = "Command "
			}
			if _, first, _ := strings.Cut(docs[0], ": "); !strings.HasPrefix(first, want) {
				t.Errorf("%s: doc comment %q should start with %q", dir, first, want)
			}
		}
	}
}
