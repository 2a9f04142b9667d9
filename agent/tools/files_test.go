package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
)

// newWorkspace returns a call context whose workspace is a fresh directory
// inside a parent that also holds a secret file outside the workspace.
func newWorkspace(t *testing.T) (agent.CallContext, string) {
	t.Helper()
	parent := t.TempDir()
	ws := filepath.Join(parent, "ws")
	outside := filepath.Join(parent, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(outside, "secret.txt"), "top secret")
	mustWrite(t, filepath.Join(parent, "x"), "parent file")
	return agent.CallContext{AgentID: "main", Workspace: ws}, outside
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func call(t *testing.T, tool agent.Tool, cc agent.CallContext, args any) (map[string]any, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), cc, raw)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%s result is not a JSON object: %v: %s", tool.Spec().Name, err, out)
	}
	return m, nil
}

func TestConfinement(t *testing.T) {
	cc, outside := newWorkspace(t)
	ws := cc.Workspace
	mustWrite(t, filepath.Join(ws, "inside", "ok.txt"), "inside text")
	links := map[string]string{
		"toOutsideFile": filepath.Join(outside, "secret.txt"), // absolute, outside
		"toOutsideDir":  outside,                              // directory outside
		"relOut":        "../outside",                         // relative, outside
		"tmp":           os.TempDir(),                         // like a link to /tmp
		"goodLink":      "inside/ok.txt",                      // relative, stays inside
		"goodDir":       "inside",                             // relative dir, stays inside
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	read, write, list := NewReadFile(Options{}), NewWriteFile(Options{}), NewListFiles(Options{})

	tests := []struct {
		name    string
		tool    agent.Tool
		args    map[string]any
		wantErr string // "" = allowed
	}{
		{"dotdot read", read, map[string]any{"path": "../x"}, `path "../x" is outside the workspace; use a path relative to the workspace`},
		{"dotdot inside path", read, map[string]any{"path": "inside/../../x"}, "outside the workspace"},
		{"absolute etc passwd", read, map[string]any{"path": "/etc/passwd"}, `path "/etc/passwd" is outside the workspace`},
		{"absolute inside ok", read, map[string]any{"path": filepath.Join(ws, "inside", "ok.txt")}, ""},
		{"dotdot that stays inside", read, map[string]any{"path": "inside/../inside/ok.txt"}, ""},
		{"symlink final file out", read, map[string]any{"path": "toOutsideFile"}, "through a symbolic link"},
		{"symlink dir component out", read, map[string]any{"path": "toOutsideDir/secret.txt"}, "through a symbolic link"},
		{"relative symlink out", read, map[string]any{"path": "relOut/secret.txt"}, "through a symbolic link"},
		{"symlink to tmp", list, map[string]any{"path": "tmp"}, "through a symbolic link"},
		{"symlink inside file ok", read, map[string]any{"path": "goodLink"}, ""},
		{"symlinked dir inside ok", read, map[string]any{"path": "goodDir/ok.txt"}, ""},
		{"list dotdot", list, map[string]any{"path": ".."}, "outside the workspace"},
		{"list symlinked dir out", list, map[string]any{"path": "toOutsideDir"}, "through a symbolic link"},
		{"write dotdot", write, map[string]any{"path": "../evil.txt", "content": "x"}, "outside the workspace"},
		{"write absolute", write, map[string]any{"path": "/tmp/evil.txt", "content": "x"}, "outside the workspace"},
		{"write through final symlink", write, map[string]any{"path": "toOutsideFile", "content": "pwned"}, "through a symbolic link"},
		{"write under symlinked parent", write, map[string]any{"path": "toOutsideDir/new/evil.txt", "content": "x"}, "through a symbolic link"},
		{"write via inside symlink ok", write, map[string]any{"path": "goodDir/new.txt", "content": "x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, tt.tool, cc, tt.args)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("want allowed, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want refusal containing %q, got success", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrOutsideWorkspace) {
				t.Fatalf("error %q does not wrap ErrOutsideWorkspace", err)
			}
		})
	}

	// Nothing outside was touched.
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(b) != "top secret" {
		t.Fatalf("outside file changed to %q", b)
	}
	for _, p := range []string{filepath.Join(filepath.Dir(ws), "evil.txt"), filepath.Join(outside, "new")} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s was created outside the workspace", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "inside", "new.txt")); err != nil || string(b) != "x" {
		t.Fatalf("write through inside symlink: %q, %v", b, err)
	}
}

func TestWriteReadListRoundTrip(t *testing.T) {
	cc, _ := newWorkspace(t)
	read, write, list := NewReadFile(Options{}), NewWriteFile(Options{}), NewListFiles(Options{})

	res, err := call(t, write, cc, map[string]any{"path": "notes/day1/todo.md", "content": "héllo\n"})
	if err != nil {
		t.Fatal(err)
	}
	if res["path"] != "notes/day1/todo.md" || res["bytes"] != float64(len("héllo\n")) {
		t.Fatalf("write result %v", res)
	}
	if _, err := call(t, write, cc, map[string]any{"path": "notes/day1/todo.md", "content": "world\n", "append": true}); err != nil {
		t.Fatal(err)
	}
	res, err = call(t, read, cc, map[string]any{"path": "./notes/day1/todo.md"})
	if err != nil {
		t.Fatal(err)
	}
	if res["content"] != "héllo\nworld\n" || res["truncated"] != false {
		t.Fatalf("read result %v", res)
	}
	// Replace, not append.
	if _, err := call(t, write, cc, map[string]any{"path": "notes/day1/todo.md", "content": "new"}); err != nil {
		t.Fatal(err)
	}
	if res, _ = call(t, read, cc, map[string]any{"path": "notes/day1/todo.md"}); res["content"] != "new" {
		t.Fatalf("after replace: %v", res)
	}
	if _, err := call(t, write, cc, map[string]any{"path": "a.txt", "content": "12345"}); err != nil {
		t.Fatal(err)
	}

	res, err = call(t, list, cc, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	assertEntries(t, res, `[{"name":"a.txt","size":5,"type":"file"},{"name":"notes","size":0,"type":"dir"}]`)
	res, err = call(t, list, cc, map[string]any{"path": ".", "recursive": true})
	if err != nil {
		t.Fatal(err)
	}
	assertEntries(t, res, `[{"name":"a.txt","size":5,"type":"file"},{"name":"notes","size":0,"type":"dir"},`+
		`{"name":"notes/day1","size":0,"type":"dir"},{"name":"notes/day1/todo.md","size":3,"type":"file"}]`)
	res, err = call(t, list, cc, map[string]any{"path": "notes", "recursive": true})
	if err != nil {
		t.Fatal(err)
	}
	assertEntries(t, res, `[{"name":"day1","size":0,"type":"dir"},{"name":"day1/todo.md","size":3,"type":"file"}]`)
}

func assertEntries(t *testing.T, res map[string]any, want string) {
	t.Helper()
	got, _ := json.Marshal(res["entries"])
	if string(got) != want {
		t.Fatalf("entries\n got %s\nwant %s", got, want)
	}
}

func TestReadFileCapAndOffset(t *testing.T) {
	cc, _ := newWorkspace(t)
	mustWrite(t, filepath.Join(cc.Workspace, "big.txt"), strings.Repeat("a", 10)+"é"+strings.Repeat("b", 10))
	read := NewReadFile(Options{ReadMaxBytes: 11})

	res, err := call(t, read, cc, map[string]any{"path": "big.txt"})
	if err != nil {
		t.Fatal(err)
	}
	// 11 bytes would split "é"; the cut falls before it.
	if res["content"] != strings.Repeat("a", 10) || res["truncated"] != true || res["nextOffset"] != float64(10) {
		t.Fatalf("first part %v", res)
	}
	res, err = call(t, read, cc, map[string]any{"path": "big.txt", "offset": 10, "limit": 100})
	if err != nil {
		t.Fatal(err)
	}
	if res["content"] != "é"+strings.Repeat("b", 9) || res["truncated"] != true || res["nextOffset"] != float64(21) {
		t.Fatalf("second part %v", res)
	}
	res, err = call(t, read, cc, map[string]any{"path": "big.txt", "offset": 20})
	if err != nil {
		t.Fatal(err)
	}
	if res["content"] != "bb" || res["truncated"] != false {
		t.Fatalf("last part %v", res)
	}
}

func TestListFilesCapAndSymlinks(t *testing.T) {
	cc, outside := newWorkspace(t)
	for _, n := range []string{"a", "b", "c"} {
		mustWrite(t, filepath.Join(cc.Workspace, n), n)
	}
	if err := os.Symlink(outside, filepath.Join(cc.Workspace, "d-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(cc.Workspace, "e-in")); err != nil {
		t.Fatal(err)
	}
	res, err := call(t, NewListFiles(Options{}), cc, map[string]any{"recursive": true})
	if err != nil {
		t.Fatal(err)
	}
	assertEntries(t, res, `[{"name":"a","size":1,"type":"file"},{"name":"b","size":1,"type":"file"},{"name":"c","size":1,"type":"file"},`+
		`{"name":"d-out","size":0,"type":"symlink"},{"name":"e-in","size":1,"type":"file"}]`)

	res, err = call(t, NewListFiles(Options{ListMaxEntries: 2}), cc, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if res["truncated"] != true || len(res["entries"].([]any)) != 2 {
		t.Fatalf("capped listing %v", res)
	}
}

func TestFileToolErrors(t *testing.T) {
	cc, _ := newWorkspace(t)
	mustWrite(t, filepath.Join(cc.Workspace, "f.txt"), "x")
	read, write, list := NewReadFile(Options{}), NewWriteFile(Options{}), NewListFiles(Options{})
	tests := []struct {
		name string
		tool agent.Tool
		raw  string
		want string
	}{
		{"invalid json", read, `{"path":`, "arguments must be a JSON object"},
		{"not an object", read, `["f.txt"]`, "arguments must be a JSON object"},
		{"missing path", read, `{}`, `missing required field "path"`},
		{"wrong type", read, `{"path":42}`, `field "path" must be a string, got 42`},
		{"bad offset", read, `{"path":"f.txt","offset":"soon"}`, `field "offset" must be an integer`},
		{"fractional limit", read, `{"path":"f.txt","limit":1.5}`, `field "limit" must be an integer`},
		{"unknown field", read, `{"path":"f.txt","file":"x"}`, `unknown field(s) "file"; accepted fields are "path", "offset", "limit"`},
		{"missing file", read, `{"path":"nope.txt"}`, `"nope.txt" does not exist in the workspace; use list_files`},
		{"read a dir", read, `{"path":"."}`, "is a directory; use list_files"},
		{"list a file", list, `{"path":"f.txt"}`, "use read_file"},
		{"write missing content", write, `{"path":"g.txt"}`, `missing required field "content"`},
		{"write bad append", write, `{"path":"g.txt","content":"x","append":"maybe"}`, `field "append" must be true or false`},
		{"write workspace itself", write, `{"path":".","content":"x"}`, "names the workspace itself"},
		{"write under a file", write, `{"path":"f.txt/g.txt","content":"x"}`, "is a file, not a directory"},
		{"no workspace", read, `{"path":"f.txt"}`, "no workspace configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cc
			if tt.name == "no workspace" {
				c.Workspace = ""
			}
			_, err := tt.tool.Call(context.Background(), c, json.RawMessage(tt.raw))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestLenientArgs(t *testing.T) {
	cc, _ := newWorkspace(t)
	mustWrite(t, filepath.Join(cc.Workspace, "f.txt"), "hello")
	out, err := NewReadFile(Options{}).Call(context.Background(), cc, json.RawMessage(`{"path":"f.txt","offset":"1","limit":2.0}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"content":"el"`) {
		t.Fatalf("got %s", out)
	}
}

func TestSpecs(t *testing.T) {
	seen := map[string]bool{}
	for _, tool := range New(Options{}) {
		s := tool.Spec()
		if seen[s.Name] {
			t.Fatalf("duplicate tool %s", s.Name)
		}
		seen[s.Name] = true
		var sch struct {
			Type       string                    `json:"type"`
			Properties map[string]map[string]any `json:"properties"`
			Required   []string                  `json:"required"`
		}
		if err := json.Unmarshal(s.Schema, &sch); err != nil {
			t.Fatalf("%s schema: %v", s.Name, err)
		}
		if sch.Type != "object" || len(sch.Properties) == 0 || s.Description == "" {
			t.Fatalf("%s: incomplete spec %+v", s.Name, sch)
		}
		for _, r := range sch.Required {
			if _, ok := sch.Properties[r]; !ok {
				t.Fatalf("%s: required %q has no property", s.Name, r)
			}
		}
	}
	want := []string{"exec", "list_files", "read_file", "web_fetch", "write_file"}
	if got := agent.NewRegistry(New(Options{})...).Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("tools %v, want %v", got, want)
	}
}

func agentCC() agent.CallContext { return agent.CallContext{AgentID: "main"} }
