package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestEnsureSession(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	s := &Session{Key: "agent:main:slack:group:C42", AgentID: "main", Label: "ops", Model: "openai/gpt-5",
		Origin: slackOrigin, CreatedAt: t0}
	created, err := db.EnsureSession(ctx, s)
	if err != nil || !created {
		t.Fatalf("EnsureSession = %v, %v; want created", created, err)
	}
	if s.ID == "" || s.Kind != KindMain || s.TranscriptPath != db.TranscriptPath("main", s.ID) {
		t.Errorf("defaults not applied: %+v", s)
	}
	if !s.CreatedAt.Equal(ms(t0)) || !s.UpdatedAt.Equal(ms(t0)) {
		t.Errorf("times = %v, %v; want %v", s.CreatedAt, s.UpdatedAt, ms(t0))
	}

	// A second call keeps the stored row and reports it.
	again := &Session{Key: s.Key, AgentID: "other", Label: "changed"}
	created, err = db.EnsureSession(ctx, again)
	if err != nil || created {
		t.Fatalf("second EnsureSession = %v, %v; want not created", created, err)
	}
	if !reflect.DeepEqual(again, s) {
		t.Errorf("second EnsureSession filled\n%+v\nwant the stored\n%+v", again, s)
	}

	got, err := db.GetSession(ctx, s.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("GetSession =\n%+v\nwant\n%+v", got, s)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt location = %v, want UTC", got.CreatedAt.Location())
	}

	if _, err := db.EnsureSession(ctx, &Session{}); err == nil {
		t.Error("EnsureSession without a key succeeded")
	}
	// Another key with the same session ID is a conflict, not a silent no-op.
	_, err = db.EnsureSession(ctx, &Session{Key: "agent:main:web:dm:x", ID: s.ID})
	if !errors.Is(err, ErrExists) {
		t.Errorf("EnsureSession with a duplicate ID = %v, want ErrExists", err)
	}
}

func TestGetSessionNotFound(t *testing.T) {
	db := newTestDB(t)
	if _, err := db.GetSession(context.Background(), "agent:main:nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSession = %v, want ErrNotFound", err)
	}
}

func TestListSessions(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	add := func(key, agent, kind string, minute int) {
		t.Helper()
		if _, err := db.EnsureSession(ctx, &Session{Key: key, AgentID: agent, Kind: kind,
			CreatedAt: t0.Add(time.Duration(minute) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	add("a:main", "main", KindMain, 1)
	add("a:sub1", "main", KindSubagent, 2)
	add("a:sub2", "main", KindSubagent, 3)
	add("b:main", "ops", KindMain, 4)
	if err := db.MarkSessionDeleted(ctx, "a:sub1", t0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		f    SessionFilter
		want []string
	}{
		{"all live, newest first", SessionFilter{}, []string{"b:main", "a:sub2", "a:main"}},
		{"include deleted", SessionFilter{IncludeDeleted: true}, []string{"b:main", "a:sub2", "a:sub1", "a:main"}},
		{"agent", SessionFilter{AgentID: "main"}, []string{"a:sub2", "a:main"}},
		{"kind", SessionFilter{Kind: KindSubagent, IncludeDeleted: true}, []string{"a:sub2", "a:sub1"}},
		{"limit", SessionFilter{Limit: 2}, []string{"b:main", "a:sub2"}},
		{"no match", SessionFilter{AgentID: "none"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := db.ListSessions(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, s := range got {
				keys = append(keys, s.Key)
			}
			if !reflect.DeepEqual(keys, tt.want) {
				t.Errorf("keys = %v, want %v", keys, tt.want)
			}
		})
	}
}

func TestAddSessionUsageAndDelete(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	s := &Session{Key: "agent:main:web:dm:c1", AgentID: "main", CreatedAt: t0}
	if _, err := db.EnsureSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	for _, u := range [][2]int64{{100, 20}, {5, 1}} {
		if err := db.AddSessionUsage(ctx, s.Key, u[0], u[1]); err != nil {
			t.Fatal(err)
		}
	}
	deletedAt := t0.Add(time.Hour)
	if err := db.MarkSessionDeleted(ctx, s.Key, deletedAt); err != nil {
		t.Fatal(err)
	}
	// A second delete keeps the first time.
	if err := db.MarkSessionDeleted(ctx, s.Key, deletedAt.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetSession(ctx, s.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.TokensIn != 105 || got.TokensOut != 21 {
		t.Errorf("tokens = %d/%d, want 105/21", got.TokensIn, got.TokensOut)
	}
	if !got.DeletedAt.Equal(ms(deletedAt)) {
		t.Errorf("DeletedAt = %v, want %v", got.DeletedAt, ms(deletedAt))
	}
	if !got.UpdatedAt.After(got.CreatedAt) {
		t.Errorf("UpdatedAt %v not bumped past CreatedAt %v", got.UpdatedAt, got.CreatedAt)
	}
	if err := db.AddSessionUsage(ctx, "nope", 1, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("AddSessionUsage(unknown) = %v, want ErrNotFound", err)
	}
	if err := db.MarkSessionDeleted(ctx, "nope", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkSessionDeleted(unknown) = %v, want ErrNotFound", err)
	}
}
