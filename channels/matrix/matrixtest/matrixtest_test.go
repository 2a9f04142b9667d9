package matrixtest

import (
	"testing"
)

// TestStartRegisterPost exercises the helpers end to end: a fresh Dendrite,
// two users, a room, a thread, and reading the thread back.
func TestStartRegisterPost(t *testing.T) {
	hs := Start(t)
	alice := hs.RegisterUser(t, "alice")
	bob := hs.RegisterUser(t, "bob")
	again := hs.RegisterUser(t, "alice")
	if again.UserID == alice.UserID {
		t.Fatalf("second registration of alice got the same user id %s", alice.UserID)
	}
	room := CreateRoomWith(t, alice, bob.UserID)
	if _, err := bob.JoinRoomByID(t.Context(), room); err != nil {
		t.Fatalf("bob joins: %v", err)
	}
	WaitJoined(t, alice, room, bob.UserID)
	root := Post(t, alice, room, "root")
	reply := PostInThread(t, bob, room, root, "in the thread", alice.UserID)
	got := WaitThreadMessages(t, alice, room, root, bob.UserID, 1)
	if len(got) != 1 || got[0].ID != reply || ThreadRoot(got[0]) != root {
		t.Fatalf("thread messages = %v, want bob's %s rooted at %s", got, reply, root)
	}
	if top := WaitThreadMessages(t, bob, room, "", alice.UserID, 1); top[0].ID != root {
		t.Fatalf("alice's top-level message = %s, want %s", top[0].ID, root)
	}
}

func TestPatchConfig(t *testing.T) {
	in := "global:\n  private_key: matrix_key.pem\n  disable_federation: false\nlogging:\n- type: std\n  level: trace\n"
	got, err := patchConfig(in, "/data/key.pem")
	if err != nil {
		t.Fatal(err)
	}
	want := "global:\n  private_key: /data/key.pem\n  disable_federation: true\nlogging:\n- type: std\n  level: warn\n"
	if got != want {
		t.Fatalf("patched config:\n%s\nwant:\n%s", got, want)
	}
	if _, err := patchConfig("global: {}\n", "k"); err == nil {
		t.Fatal("patchConfig accepted a config without disable_federation")
	}
}
