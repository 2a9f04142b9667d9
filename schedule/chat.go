package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// Usage is the one-line usage of /schedule.
const Usage = `Usage: /schedule every <duration> <task> | cron "<expr>" <task> | in <duration> <task> | at <YYYY-MM-DD HH:MM> <task> | list | pause|resume|remove <id>`

// Conversation is where a schedule is made and delivered: the requester
// session, its agent and origin, and who asked.
type Conversation struct {
	SessionKey string
	AgentID    string
	Origin     channels.Origin
	By         string // sender id, or the model's session for the tool
	Source     string // store.ScheduleFromChat or store.ScheduleFromTool
}

// Spec is a parsed "when": kind and expression as the store keeps them.
type Spec struct {
	Kind, Expr string
}

// errUsage marks an error whose reply carries the usage line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func badf(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// ParseWhen reads a "when" at the start of text — every <duration>,
// cron "<expr>" (or a lone @descriptor), in <duration>, at <YYYY-MM-DD
// HH:MM> — and returns it with the rest of the text (the task). Times of
// "in" and "at" are resolved against now in loc; a past time is an error.
func ParseWhen(text string, now time.Time, loc *time.Location, minInterval time.Duration) (Spec, string, error) {
	word, rest := cut(text)
	switch strings.ToLower(word) {
	case "every":
		d, rest := cut(rest)
		dur, err := config.ParseEvery(d)
		if d == "" || err != nil {
			return Spec{}, "", badf("%q is not a duration like 90s, 30m, 1h30m or 1d", d)
		}
		if dur < minInterval {
			return Spec{}, "", badf("every %s is more often than allowed: the shortest interval is %s", d, shortDuration(minInterval))
		}
		return Spec{store.ScheduleEvery, dur.String()}, rest, nil
	case "cron":
		expr, rest, err := quoted(rest)
		if err != nil {
			return Spec{}, "", err
		}
		if err := config.CheckCronInterval(expr, minInterval); err != nil {
			return Spec{}, "", badf("%v", err)
		}
		return Spec{store.ScheduleCron, expr}, rest, nil
	case "in":
		d, rest := cut(rest)
		dur, err := config.ParseEvery(d)
		if d == "" || err != nil {
			return Spec{}, "", badf("%q is not a duration like 90s, 30m, 2h or 1d", d)
		}
		return Spec{store.ScheduleAt, now.Add(dur).UTC().Truncate(time.Second).Format(time.RFC3339)}, rest, nil
	case "at":
		date, rest := cut(rest)
		clock, rest := cut(rest)
		t, err := time.ParseInLocation(config.ScheduleAtLayout, date+" "+clock, loc)
		if err != nil {
			return Spec{}, "", badf("%q is not a time like 2026-12-01 09:00", strings.TrimSpace(date+" "+clock))
		}
		if !t.After(now) {
			return Spec{}, "", badf("%s %s is in the past (now %s)", t.Format(config.ScheduleAtLayout), loc, now.In(loc).Format(config.ScheduleAtLayout))
		}
		return Spec{store.ScheduleAt, t.UTC().Format(time.RFC3339)}, rest, nil
	}
	if strings.HasPrefix(word, "@") {
		if err := config.CheckCronInterval(word, minInterval); err != nil {
			return Spec{}, "", badf("%v", err)
		}
		return Spec{store.ScheduleCron, word}, rest, nil
	}
	if word == "" {
		return Spec{}, "", badf("say when: every, cron, in or at")
	}
	return Spec{}, "", badf("%q is not every, cron, in or at", word)
}

// cut splits off the first word.
func cut(s string) (word, rest string) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeftFunc(s[i:], unicode.IsSpace)
}

// quoted reads "<expr>" (straight or curly quotes) at the start of s.
func quoted(s string) (expr, rest string, err error) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	for _, q := range [][2]string{{`"`, `"`}, {"“", "”"}, {"'", "'"}, {"`", "`"}} {
		if strings.HasPrefix(s, q[0]) {
			body := s[len(q[0]):]
			i := strings.Index(body, q[1])
			if i < 0 {
				return "", "", badf("the cron expression has no closing quote")
			}
			return body[:i], strings.TrimLeftFunc(body[i+len(q[1]):], unicode.IsSpace), nil
		}
	}
	if strings.HasPrefix(s, "@") {
		w, rest := cut(s)
		return w, rest, nil
	}
	return "", "", badf(`put the cron expression in quotes: cron "0 9 * * 1-5" <task>`)
}

// Add makes a schedule in the conversation and returns its reply line:
// ⏰ Scheduled <id>: <when> · next <time, timezone>.
func (s *Scheduler) Add(ctx context.Context, c Conversation, spec Spec, task string) (*store.Schedule, string, error) {
	cfg := s.config()
	task = strings.TrimSpace(task)
	if task == "" {
		return nil, "", badf("say what to do after the time")
	}
	tz := cfg.Schedules.Timezone
	w, err := Parse(spec.Kind, spec.Expr, tz)
	if err != nil {
		return nil, "", badf("%v", err)
	}
	now := s.d.Clock.Now()
	next := w.First(now)
	if next.IsZero() || (spec.Kind == store.ScheduleAt && !next.After(now)) {
		return nil, "", badf("that time is in the past")
	}
	sc := &store.Schedule{
		ID: newID(), SessionKey: c.SessionKey, AgentID: c.AgentID, Kind: spec.Kind, Expr: w.Expr, Timezone: tz,
		Task: task, Origin: replyOrigin(c.Origin), Source: c.Source, NextDue: next, CreatedAt: now, CreatedBy: c.By,
	}
	err = s.d.Store.AddScheduleWithin(ctx, sc, store.ScheduleLimits{PerConversation: cfg.Schedules.MaxPerConversation,
		PerSender: cfg.Schedules.MaxPerSender, Total: cfg.Schedules.MaxTotal})
	if le := (*store.LimitError)(nil); errors.As(err, &le) {
		switch le.Limit {
		case "maxPerSender":
			return nil, "", badf("you already have %d schedules across your conversations (schedules.maxPerSender %d); remove one first", le.Count, le.Max)
		case "maxTotal":
			return nil, "", badf("the gateway already has %d schedules (schedules.maxTotal %d); ask the operator, or remove one first", le.Count, le.Max)
		}
		return nil, "", badf("this conversation already has %d schedules (schedules.maxPerConversation %d); remove one first", le.Count, le.Max)
	}
	if err != nil {
		return nil, "", fmt.Errorf("could not store the schedule: %w", err)
	}
	s.Wake()
	s.d.OnChange(sc.SessionKey)
	return sc, fmt.Sprintf("⏰ Scheduled %s: %s · next %s.", sc.ID, w.Label(), w.FormatTime(next)), nil
}

// replyOrigin is where a schedule made in a message announces: the same
// chat and thread, not a reply to that one message.
func replyOrigin(o channels.Origin) channels.Origin {
	o.MessageID, o.SenderID = "", ""
	return o
}

// newID is a short schedule id people can type: s + 7 hex digits.
func newID() string {
	return "s" + strings.ReplaceAll(uuid.NewString(), "-", "")[:7]
}

// Command runs /schedule <args> in the conversation and returns the reply.
func (s *Scheduler) Command(ctx context.Context, c Conversation, args string) string {
	reply, err := s.command(ctx, c, args)
	if ue := (*usageError)(nil); errors.As(err, &ue) {
		return "⚠️ " + strings.TrimSuffix(ue.msg, ".") + ". " + Usage
	}
	if err != nil {
		return "⚠️ " + err.Error()
	}
	return reply
}

func (s *Scheduler) command(ctx context.Context, c Conversation, args string) (string, error) {
	cfg := s.config()
	word, rest := cut(args)
	switch strings.ToLower(word) {
	case "", "list", "ls":
		return s.List(ctx, c.SessionKey)
	case "pause", "resume", "remove", "rm", "delete":
		id, _ := cut(rest)
		if id == "" {
			return "", badf("say which schedule: /schedule %s <id>", strings.ToLower(word))
		}
		return s.act(ctx, c, strings.ToLower(word), id)
	}
	loc, err := LoadLocation(cfg.Schedules.Timezone)
	if err != nil {
		return "", err
	}
	spec, task, err := ParseWhen(args, s.d.Clock.Now(), loc, time.Duration(cfg.Schedules.MinIntervalSeconds)*time.Second)
	if err != nil {
		return "", err
	}
	c.Source = store.ScheduleFromChat
	_, reply, err := s.Add(ctx, c, spec, task)
	return reply, err
}

// find returns the conversation's schedule id.
func (s *Scheduler) find(ctx context.Context, sessionKey, id string) (*store.Schedule, error) {
	sc, err := s.d.Store.GetSchedule(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sc.SessionKey != sessionKey) {
		return nil, badf("no schedule %q in this conversation (see /schedule list)", id)
	}
	return sc, err
}

func (s *Scheduler) act(ctx context.Context, c Conversation, action, id string) (string, error) {
	sc, err := s.find(ctx, c.SessionKey, id)
	if err != nil {
		return "", err
	}
	defer s.d.OnChange(sc.SessionKey)
	switch action {
	case "pause":
		if err := s.d.Store.PauseSchedule(ctx, sc.ID); err != nil {
			return "", err
		}
		return fmt.Sprintf("⏸️ Paused %s.", sc.ID), nil
	case "resume":
		w, err := Parse(sc.Kind, sc.Expr, sc.Timezone)
		if err != nil {
			return "", err
		}
		now := s.d.Clock.Now()
		next := sc.NextDue
		if sc.Kind == store.ScheduleAt {
			if next.IsZero() || !next.After(now) {
				return "", badf("schedule %s was a one-off whose time has passed", sc.ID)
			}
		} else {
			next = w.First(now)
		}
		if err := s.d.Store.ResumeSchedule(ctx, sc.ID, next); err != nil {
			return "", err
		}
		s.Wake()
		return fmt.Sprintf("▶️ Resumed %s · next %s.", sc.ID, w.FormatTime(next)), nil
	}
	if sc.Source == store.ScheduleFromConfig {
		return "", badf("schedule %s comes from the config file: pause it here, or take it out of schedules.list", sc.ID)
	}
	if err := s.d.Store.RemoveSchedule(ctx, sc.ID); err != nil {
		return "", err
	}
	return fmt.Sprintf("🗑️ Removed %s.", sc.ID), nil
}

// Line is one schedule for people: <id> · <when> · next <time> (or paused,
// done) · <task>.
func Line(sc *store.Schedule) string {
	w, err := Parse(sc.Kind, sc.Expr, sc.Timezone)
	when, state := sc.Kind+" "+sc.Expr, "done"
	if err == nil {
		when = w.Label()
	}
	switch {
	case sc.Paused:
		state = "paused"
	case !sc.NextDue.IsZero() && err == nil:
		state = "next " + w.FormatTime(sc.NextDue)
	}
	return fmt.Sprintf("%s · %s · %s · %s", sc.ID, when, state, cutText(sc.Task, 72))
}

func cutText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// List renders the conversation's schedules.
func (s *Scheduler) List(ctx context.Context, sessionKey string) (string, error) {
	list, err := s.d.Store.ListSchedules(ctx, sessionKey)
	if err != nil {
		return "", fmt.Errorf("could not read the schedules: %w", err)
	}
	if len(list) == 0 {
		return "⏰ Schedules: none for this conversation.", nil
	}
	lines := []string{"⏰ Schedules (this conversation)"}
	for i := range list {
		lines = append(lines, fmt.Sprintf("%d) %s", i+1, Line(&list[i])))
	}
	return strings.Join(lines, "\n"), nil
}

// StatusLine is /status's line about the conversation's next firing; ""
// when it has no schedules.
func (s *Scheduler) StatusLine(ctx context.Context, sessionKey string) string {
	list, err := s.d.Store.ListSchedules(ctx, sessionKey)
	if err != nil {
		return "⏰ Schedules: could not be read"
	}
	if len(list) == 0 {
		return ""
	}
	var next *store.Schedule
	for i := range list {
		sc := &list[i]
		if sc.Paused || sc.NextDue.IsZero() {
			continue
		}
		if next == nil || sc.NextDue.Before(next.NextDue) {
			next = sc
		}
	}
	if next == nil {
		return fmt.Sprintf("⏰ Schedules: %d · none due", len(list))
	}
	when := next.NextDue.UTC().Format(time.RFC3339)
	if w, err := Parse(next.Kind, next.Expr, next.Timezone); err == nil {
		when = w.FormatTime(next.NextDue)
	}
	return fmt.Sprintf("⏰ Schedules: %d · next %s (%s)", len(list), when, next.ID)
}

// Operate is an operator's action on any schedule (the console, SPEC §27):
// pause, resume or remove as the chat commands do them, or run (due now;
// a paused schedule is resumed). The reply is the chat command's line;
// store.ErrNotFound for an unknown id.
func (s *Scheduler) Operate(ctx context.Context, id, action string) (string, error) {
	sc, err := s.d.Store.GetSchedule(ctx, id)
	if err != nil {
		return "", err
	}
	switch action {
	case "pause", "resume", "remove":
		return s.act(ctx, Conversation{SessionKey: sc.SessionKey, AgentID: sc.AgentID}, action, id)
	case "run":
		if err := s.d.Store.ResumeSchedule(ctx, sc.ID, s.d.Clock.Now()); err != nil {
			return "", err
		}
		s.d.OnChange(sc.SessionKey)
		s.Wake()
		return fmt.Sprintf("▶️ Running %s now.", sc.ID), nil
	}
	return "", badf("unknown schedule action %q (pause, resume, remove or run)", action)
}
