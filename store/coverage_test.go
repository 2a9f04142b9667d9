package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/heraldhq/herald/store"
)

// notInContract are the methods of store.Store the contract suite need not
// drive, each for a reason: the database's own plumbing, tested in
// db_test.go. (Calls are matched by method name only.)
var notInContract = []string{
	"Path",     // the file or the URL without its password
	"StateDir", // where a SQLite store keeps its files
}

// Every method of the production interfaces is called by the contract
// suite (store/storetest), so a backend cannot pass it without each.
func TestContractCoversEveryMethod(t *testing.T) {
	files, err := filepath.Glob("storetest/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("storetest sources: %v, %v", files, err)
	}
	called := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
					called[sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	it := reflect.TypeOf((*store.Store)(nil)).Elem()
	for i := range it.NumMethod() {
		name := it.Method(i).Name
		if !called[name] && !slices.Contains(notInContract, name) {
			t.Errorf("store.Store.%s is not driven by the contract suite (storetest)", name)
		}
	}
}
