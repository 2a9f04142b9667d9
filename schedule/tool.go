package schedule

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
)

// ToolName is the model's tool for schedules (SPEC §19).
const ToolName = "schedule"

const toolSchema = `{"type":"object","properties":{
"action":{"type":"string","enum":["add","list","remove"],"description":"add a schedule, list this conversation's, or remove one by id"},
"when":{"type":"string","description":"for add: 'every <duration>' (30m, 1h, 1d), 'cron \"<five fields>\"' or '@daily', 'in <duration>', or 'at <YYYY-MM-DD HH:MM>' (schedules.timezone)"},
"task":{"type":"string","description":"for add: what the agent should do at each firing; the result is announced in this conversation"},
"id":{"type":"string","description":"for remove: the schedule id"}},
"required":["action"]}`

// Tool is the schedule tool: the model adds, lists and removes the
// conversation's schedules, as /schedule does. It acts on the conversation
// of a top-level session only.
func (s *Scheduler) Tool() agent.Tool { return scheduleTool{s} }

type scheduleTool struct{ s *Scheduler }

func (scheduleTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: ToolName, Schema: json.RawMessage(toolSchema),
		Description: "Schedule recurring or one-off runs that announce their result into this conversation (\"remind me tomorrow at 9\", \"every weekday at 9 summarise…\"). Each firing is a background sub-agent run of the task. Say ANNOUNCE_SKIP in a task's instructions to post nothing when there is nothing new."}
}

func (scheduleTool) Group() string { return "" }

type toolArgs struct {
	Action string `json:"action"`
	When   string `json:"when"`
	Task   string `json:"task"`
	ID     string `json:"id"`
}

type toolSchedule struct {
	ID     string `json:"id"`
	When   string `json:"when"`
	Next   string `json:"next,omitempty"` // RFC 3339 UTC
	Paused bool   `json:"paused,omitempty"`
	Task   string `json:"task"`
}

func (t scheduleTool) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	var a toolArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("schedule: arguments are not a JSON object with action, when, task, id: %w", err)
	}
	if cc.Depth > 0 {
		return result(map[string]any{"status": "forbidden", "error": "only the conversation's own session can make schedules"})
	}
	s := t.s
	cfg := s.config()
	conv := Conversation{SessionKey: cc.SessionKey, AgentID: cc.AgentID, Origin: cc.Origin, By: cmp.Or(cc.Origin.SenderID, cc.SessionKey), Source: store.ScheduleFromTool}
	switch strings.ToLower(a.Action) {
	case "add":
		loc, err := LoadLocation(cfg.Schedules.Timezone)
		if err != nil {
			return "", err
		}
		spec, rest, err := ParseWhen(a.When, s.d.Clock.Now(), loc, time.Duration(cfg.Schedules.MinIntervalSeconds)*time.Second)
		if err == nil && strings.TrimSpace(rest) != "" {
			err = badf("%q after the time is not part of when; put it in task", rest)
		}
		if err != nil {
			return errResult(err)
		}
		sc, reply, err := s.Add(ctx, conv, spec, a.Task)
		if err != nil {
			return errResult(err)
		}
		return result(map[string]any{"status": "ok", "id": sc.ID, "next": sc.NextDue.UTC().Format(time.RFC3339), "message": reply})
	case "list":
		list, err := s.d.Store.ListSchedules(ctx, cc.SessionKey)
		if err != nil {
			return "", err
		}
		out := make([]toolSchedule, 0, len(list))
		for i := range list {
			sc := &list[i]
			ts := toolSchedule{ID: sc.ID, When: sc.Kind + " " + sc.Expr, Paused: sc.Paused, Task: sc.Task}
			if w, err := Parse(sc.Kind, sc.Expr, sc.Timezone); err == nil {
				ts.When = w.Label()
			}
			if !sc.NextDue.IsZero() {
				ts.Next = sc.NextDue.UTC().Format(time.RFC3339)
			}
			out = append(out, ts)
		}
		return result(map[string]any{"status": "ok", "count": len(out), "schedules": out})
	case "remove":
		if a.ID == "" {
			return errResult(badf("remove needs the schedule's id (see action list)"))
		}
		reply, err := s.act(ctx, conv, "remove", a.ID)
		if err != nil {
			return errResult(err)
		}
		return result(map[string]any{"status": "ok", "message": reply})
	}
	return errResult(badf("action must be add, list or remove, not %q", a.Action))
}

func errResult(err error) (string, error) {
	if ue := (*usageError)(nil); errors.As(err, &ue) {
		return result(map[string]any{"status": "error", "error": ue.msg})
	}
	return result(map[string]any{"status": "error", "error": err.Error()})
}

func result(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
