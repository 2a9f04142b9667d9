package tools

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A folder of cc.ReadOnlyDirs (skills.paths) is read and listed by
// absolute path, never written; paths beside it stay outside.
func TestReadOnlyDirs(t *testing.T) {
	cc, outside := newWorkspace(t)
	skills := filepath.Join(filepath.Dir(outside), "skills")
	mustWrite(t, filepath.Join(skills, "deploy", "SKILL.md"), "---\nname: deploy\n---\nship it")
	cc.ReadOnlyDirs = []string{skills}

	res, err := call(t, NewReadFile(Options{}), cc, map[string]any{"path": filepath.Join(skills, "deploy", "SKILL.md")})
	if err != nil || !strings.Contains(res["content"].(string), "ship it") || res["readOnly"] != true {
		t.Fatalf("read_file in a read-only dir = %v, %v", res, err)
	}
	res, err = call(t, NewListFiles(Options{}), cc, map[string]any{"path": filepath.Join(skills, "deploy")})
	if err != nil || !strings.Contains(fmt.Sprint(res["entries"]), "SKILL.md") {
		t.Fatalf("list_files in a read-only dir = %v, %v", res, err)
	}
	if _, err := call(t, NewWriteFile(Options{}), cc, map[string]any{"path": filepath.Join(skills, "deploy", "SKILL.md"), "content": "x"}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("write_file into a read-only dir = %v, want ErrReadOnly", err)
	}
	if _, err := call(t, NewReadFile(Options{}), cc, map[string]any{"path": filepath.Join(outside, "secret.txt")}); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("read_file beside the read-only dir = %v, want ErrOutsideWorkspace", err)
	}
	if _, err := call(t, NewReadFile(Options{}), cc, map[string]any{"path": filepath.Join(skills, "..", "outside", "secret.txt")}); err == nil {
		t.Error("read_file through .. out of a read-only dir succeeded")
	}
}
