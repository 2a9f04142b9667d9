package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
)

// layered returns the call contexts of two conversations of one agent
// whose agent workspace holds legacy.txt, a symbolic link into the
// conversations folder, and conversation a's secret.
func layered(t *testing.T) (a, b agent.CallContext) {
	t.Helper()
	aws := filepath.Join(t.TempDir(), "ws")
	a = agent.CallContext{AgentID: "main", AgentWorkspace: aws, Workspace: ConversationWorkspace(aws, "agent:main:web:dm:a")}
	b = agent.CallContext{AgentID: "main", AgentWorkspace: aws, Workspace: ConversationWorkspace(aws, "agent:main:web:dm:b")}
	mustWrite(t, filepath.Join(aws, "legacy.txt"), "legacy")
	mustWrite(t, filepath.Join(a.Workspace, "secret.txt"), "a's secret")
	if err := EnsureWorkspace(aws, b.Workspace); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("conversations/"+filepath.Base(a.Workspace), filepath.Join(aws, "link")); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestAgentLayerNeverReachesAnotherConversation: reads fall back to the
// agent workspace, but never into its conversations folder, directly or
// through a symbolic link there; writes into it are refused as read-only.
func TestAgentLayerNeverReachesAnotherConversation(t *testing.T) {
	a, b := layered(t)
	rf, wf, lf := NewReadFile(Options{}), NewWriteFile(Options{}), NewListFiles(Options{})

	res, err := call(t, rf, b, map[string]any{"path": "legacy.txt"})
	if err != nil || res["content"] != "legacy" || res["readOnly"] != true {
		t.Errorf("read legacy.txt = %v, %v; want it read-only from the agent workspace", res, err)
	}
	for _, p := range []string{"link/secret.txt", "conversations/" + filepath.Base(a.Workspace) + "/secret.txt",
		filepath.Join(a.AgentWorkspace, "link", "secret.txt"), filepath.Join(a.Workspace, "secret.txt")} {
		if res, err := call(t, rf, b, map[string]any{"path": p}); err == nil {
			t.Errorf("conversation b read %q: %v", p, res)
		}
	}
	res, err = call(t, lf, b, map[string]any{"recursive": true})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res["entries"].([]any) {
		name := e.(map[string]any)["name"].(string)
		if strings.HasPrefix(name, "conversations") || strings.Contains(name, "secret") {
			t.Errorf("conversation b lists %q", name)
		}
	}
	_, err = call(t, wf, b, map[string]any{"path": filepath.Join(b.AgentWorkspace, "legacy.txt"), "content": "x"})
	if !errors.Is(err, ErrReadOnly) {
		t.Errorf("write into the agent workspace: %v, want ErrReadOnly", err)
	}
	if _, err := call(t, wf, b, map[string]any{"path": "legacy.txt", "content": " and b's line", "append": true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.Workspace, "legacy.txt")); string(got) != "legacy and b's line" {
		t.Errorf("appending to a shared file wrote %q into the conversation's copy", got)
	}
	if got, _ := os.ReadFile(filepath.Join(b.AgentWorkspace, "legacy.txt")); string(got) != "legacy" {
		t.Errorf("the shared file is now %q", got)
	}
}

func TestConversationID(t *testing.T) {
	for key, want := range map[string]string{
		"agent:main:slack:group:C1:thread:1700.1": "slack_group_C1_thread_1700.1-",
		"agent:main:web:dm:../../etc":             "web_dm_.._.._etc-",
		"agent:main:matrix:group:!r:x.org":        "matrix_group__r_x.org-",
	} {
		got := ConversationID(key)
		if !strings.HasPrefix(got, want) || len(got) != len(want)+12 || strings.ContainsAny(got, "/:\x00") {
			t.Errorf("ConversationID(%q) = %q, want %q + 12 hex digits", key, got, want)
		}
	}
	if ConversationID("agent:main:web:dm:a/b") == ConversationID("agent:main:web:dm:a_b") {
		t.Error("two keys that read alike share a workspace")
	}
}
