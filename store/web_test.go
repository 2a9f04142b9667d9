package store

import (
	"context"
	"reflect"
	"testing"
	"time"
)

func TestAppendWebAndWebAfter(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	steps := []struct {
		client  string
		msg     WebMessage
		wantSeq int64
	}{
		{"alice", WebMessage{Role: "user", Text: "hi", At: t0}, 1},
		{"alice", WebMessage{Role: "assistant", Text: "hello", At: t0.Add(time.Second)}, 2},
		{"bob", WebMessage{Role: "user", Text: "yo", At: t0}, 1},
		{"alice", WebMessage{Role: "announce", Text: "✅ done", RunID: "r1", At: t0.Add(2 * time.Second)}, 3},
		{"alice", WebMessage{Role: "announce", Text: "✅ done (redelivered)", RunID: "r1"}, 3},
		{"bob", WebMessage{Role: "announce", Text: "other client", RunID: "r1", At: t0}, 2},
		{"alice", WebMessage{Role: "system", Text: "/status", At: t0.Add(3 * time.Second)}, 4},
	}
	for i, s := range steps {
		m := s.msg
		seq, err := db.AppendWeb(ctx, s.client, &m)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if seq != s.wantSeq || m.Seq != seq {
			t.Errorf("step %d (%s %q): seq %d (m.Seq %d), want %d", i, s.client, s.msg.Text, seq, m.Seq, s.wantSeq)
		}
	}
	tests := []struct {
		client string
		after  int64
		limit  int
		want   []WebMessage
	}{
		{"alice", 0, 0, []WebMessage{
			{Seq: 1, Role: "user", Text: "hi", At: ms(t0)},
			{Seq: 2, Role: "assistant", Text: "hello", At: ms(t0.Add(time.Second))},
			{Seq: 3, Role: "announce", Text: "✅ done", RunID: "r1", At: ms(t0.Add(2 * time.Second))},
			{Seq: 4, Role: "system", Text: "/status", At: ms(t0.Add(3 * time.Second))},
		}},
		{"alice", 2, 1, []WebMessage{
			{Seq: 3, Role: "announce", Text: "✅ done", RunID: "r1", At: ms(t0.Add(2 * time.Second))},
		}},
		{"alice", 4, 0, nil},
		{"carol", 0, 0, nil},
	}
	for _, tt := range tests {
		got, err := db.WebAfter(ctx, tt.client, tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("WebAfter(%s, %d, %d) =\n%+v\nwant\n%+v", tt.client, tt.after, tt.limit, got, tt.want)
		}
	}
	if _, err := db.AppendWeb(ctx, "", &WebMessage{Role: "user"}); err == nil {
		t.Error("AppendWeb without a client succeeded")
	}
}
