package storetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

func configSchedule(id string, next time.Time) store.Schedule {
	return store.Schedule{ID: id, SessionKey: convKey, AgentID: "main", Kind: store.ScheduleEvery,
		Expr: "1m0s", Task: "check the status page", Origin: origin, NextDue: next, CreatedAt: t0}
}

func everyMinute(sc *store.Schedule) store.Firing {
	id := sc.ID + "-" + sc.NextDue.Format("150405")
	return store.Firing{Run: &store.Run{ID: id, ChildKey: "agent:main:subagent:" + id, ChildSessionID: "sess-" + id,
		RequesterKey: sc.SessionKey, AgentID: "main", Task: sc.Task, Origin: sc.Origin, CostUSD: -1, CreatedAt: t0, ScheduleDue: sc.NextDue},
		Child: &store.Session{}, Next: sc.NextDue.Add(time.Minute)}
}

// A restart re-reads the config: an unchanged schedule keeps its next due
// time (nothing fired twice or skipped), a changed one takes the new one,
// a dropped one goes; a chat schedule's id is not taken.
func testConfigSchedules(t *testing.T, s Store) {
	ctx := context.Background()
	a, b := configSchedule("a", t0), configSchedule("b", t0)
	if err := s.SyncConfigSchedules(ctx, []store.Schedule{a, b}); err != nil {
		t.Fatal(err)
	}
	if fired, err := s.FireDue(ctx, t0, time.Time{}, 10, everyMinute); err != nil || len(fired) != 2 {
		t.Fatalf("FireDue = %d, %v", len(fired), err)
	}
	a.NextDue, b.NextDue = t0.Add(time.Hour), t0.Add(time.Hour)
	b.Expr = "2m0s"
	c := configSchedule("c", t0)
	if err := s.SyncConfigSchedules(ctx, []store.Schedule{a, b, c}); err != nil {
		t.Fatal(err)
	}
	ga, _ := s.GetSchedule(ctx, "a")
	gb, _ := s.GetSchedule(ctx, "b")
	if ga == nil || !ga.NextDue.Equal(t0.Add(time.Minute)) || ga.Source != store.ScheduleFromConfig || ga.Fired != 1 {
		t.Fatalf("unchanged a: %+v", ga)
	}
	if gb == nil || !gb.NextDue.Equal(t0.Add(time.Hour)) || gb.Expr != "2m0s" {
		t.Fatalf("changed b: %+v", gb)
	}
	if err := s.SyncConfigSchedules(ctx, []store.Schedule{c}); err != nil {
		t.Fatal(err)
	}
	if all, err := s.ListSchedules(ctx, ""); err != nil || len(all) != 1 || all[0].ID != "c" {
		t.Fatalf("after dropping a and b: %+v, %v", all, err)
	}
	chat := configSchedule("mine", t0)
	if err := s.AddSchedule(ctx, &chat, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncConfigSchedules(ctx, []store.Schedule{configSchedule("mine", t0)}); err == nil {
		t.Fatal("a config schedule took the id of a chat schedule")
	}
}

// Backup writes a copy that opens with the rows (SQLite); the state in
// PostgreSQL is backed up with pg_dump, and Backup says so.
func testBackup(t *testing.T, s Store) {
	ctx := context.Background()
	if err := s.SetKV(ctx, "telegram:offset", "42"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, store.DBFile)
	err := s.Backup(ctx, path)
	if s.Driver() == store.DriverPostgres {
		if err == nil {
			t.Fatal("Backup of a PostgreSQL state succeeded")
		}
		if _, serr := os.Stat(path); serr == nil {
			t.Error("Backup of a PostgreSQL state wrote a file")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Backup(ctx, path); err == nil {
		t.Error("Backup over an existing file succeeded")
	}
	copied, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatalf("open the backup: %v", err)
	}
	defer copied.Close()
	if v, ok, err := copied.GetKV(ctx, "telegram:offset"); err != nil || !ok || v != "42" {
		t.Errorf("the backup's row = %q %v %v", v, ok, err)
	}
}

// AddScheduleWithin counts a person's schedules across conversations and
// the gateway's in all, so new conversations do not reset them; config
// schedules count in neither.
func testScheduleLimits(t *testing.T, s Store) {
	ctx := context.Background()
	if err := s.SyncConfigSchedules(ctx, []store.Schedule{configSchedule("cfg", t0)}); err != nil {
		t.Fatal(err)
	}
	add := func(id, conv, by string, lim store.ScheduleLimits) error {
		sc := configSchedule(id, t0)
		sc.SessionKey, sc.CreatedBy, sc.Source = conv, by, store.ScheduleFromChat
		return s.AddScheduleWithin(ctx, &sc, lim)
	}
	lim := store.ScheduleLimits{PerConversation: 5, PerSender: 2, Total: 3}
	for i, conv := range []string{"agent:main:slack:group:C1:thread:1", "agent:main:slack:group:C1:thread:2"} {
		if err := add("m"+string(rune('a'+i)), conv, "U1", lim); err != nil {
			t.Fatalf("U1's schedule %d: %v", i+1, err)
		}
	}
	var le *store.LimitError
	if err := add("m3", "agent:main:slack:group:C1:thread:3", "U1", lim); !errors.As(err, &le) || le.Limit != "maxPerSender" || le.Count != 2 {
		t.Errorf("U1's third schedule in a new thread: %v, want maxPerSender (2 counted)", err)
	}
	if err := add("o1", "agent:main:web:dm:c9", "c9", lim); err != nil {
		t.Fatal(err)
	}
	if err := add("o2", "agent:main:web:dm:c10", "c10", lim); !errors.As(err, &le) || le.Limit != "maxTotal" || le.Count != 3 {
		t.Errorf("a fourth schedule from a new web client: %v, want maxTotal (3 counted)", err)
	}
	if got, _ := s.GetSchedule(ctx, "o2"); got != nil {
		t.Errorf("a refused schedule was stored: %+v", got)
	}
}
