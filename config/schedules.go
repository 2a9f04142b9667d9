package config

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // IANA timezones without relying on the host's zoneinfo

	"github.com/robfig/cron/v3"
)

// Schedule defaults (SPEC §19).
const (
	DefaultScheduleMinIntervalSeconds = 60
	DefaultScheduleMaxPerConversation = 20
	DefaultScheduleMaxPerSender       = 40
	DefaultScheduleMaxTotal           = 500
	DefaultScheduleTimezone           = "UTC"
	DefaultScheduleMaxFailures        = 3
	DefaultScheduleCatchUp            = "latest"
)

// ScheduleAtLayout is the local time of an "at" schedule: 2026-12-01 09:00.
const ScheduleAtLayout = "2006-01-02 15:04"

// CatchUpPolicies are schedules.list[].catchUp's values.
var CatchUpPolicies = []string{"latest", "none", "all"}

// CronParser parses five-field cron expressions and the @ descriptors
// (@hourly, @daily, @weekly, @monthly, @yearly); "@every" is refused by
// CheckCron (schedules have "every" for that).
var CronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CheckCron parses expr as CronParser does, refusing @every and a
// CRON_TZ/TZ prefix (the timezone is its own key).
func CheckCron(expr string) (cron.Schedule, error) {
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "@every") {
		return nil, fmt.Errorf("%q: use every instead of @every", expr)
	}
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, fmt.Errorf("%q: give the timezone as timezone, not in the expression", expr)
	}
	s, err := CronParser.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("%q is not a cron expression of five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly: %v", expr, err)
	}
	return s, nil
}

// CronGap returns the shortest time between two firings of c, sampled
// over eight days (every weekday) from a fixed UTC instant, stopping early
// once a gap shorter than below is seen.
func CronGap(c cron.Schedule, below time.Duration) time.Duration {
	t := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC) // a Monday
	end := t.Add(8 * 24 * time.Hour)
	prev := c.Next(t.Add(-time.Second))
	gap := time.Duration(math.MaxInt64)
	for n := 0; n < 20000 && !prev.IsZero() && prev.Before(end); n++ {
		next := c.Next(prev)
		if next.IsZero() {
			break
		}
		gap = min(gap, next.Sub(prev))
		if gap < below {
			break
		}
		prev = next
	}
	return gap
}

// CheckCronInterval refuses a cron expression that fires more often than
// min (schedules.minIntervalSeconds).
func CheckCronInterval(expr string, min time.Duration) error {
	c, err := CheckCron(expr)
	if err != nil {
		return err
	}
	if g := CronGap(c, min); g < min {
		return fmt.Errorf("%q fires every %s, more often than allowed: the shortest interval is %s", expr, g, min)
	}
	return nil
}

// Schedules configures schedules (SPEC §19).
type Schedules struct {
	// MinIntervalSeconds: the shortest "every" and the closest two cron
	// firings may be; default 60. Tests may lower it.
	MinIntervalSeconds int `json:"minIntervalSeconds"`
	// MaxPerConversation bounds the schedules of one conversation made in
	// chat or by the model; default 20.
	MaxPerConversation int `json:"maxPerConversation"`
	// MaxPerSender bounds the schedules one person made in all
	// conversations (a new thread or web client does not reset it);
	// default 40. MaxTotal bounds the chat and tool schedules of the
	// whole gateway; default 500.
	MaxPerSender int `json:"maxPerSender"`
	MaxTotal     int `json:"maxTotal"`
	// Timezone is the IANA zone of cron and "at" times that do not name
	// one; default UTC.
	Timezone string           `json:"timezone"`
	List     []ScheduleConfig `json:"list"`
}

// ScheduleConfig is one schedule of the config file: exactly one of Cron,
// Every and At.
type ScheduleConfig struct {
	ID          string          `json:"id"`
	Cron        string          `json:"cron"`
	Every       string          `json:"every"` // a duration: 30m, 1h, 1h30m, 1d
	At          string          `json:"at"`    // 2026-12-01 09:00 (local to Timezone) or RFC 3339
	Timezone    string          `json:"timezone"`
	AgentID     string          `json:"agentId"`
	Task        string          `json:"task"`
	Deliver     ScheduleDeliver `json:"deliver"`
	CatchUp     string          `json:"catchUp"`     // latest (default) | none | all
	MaxFailures int             `json:"maxFailures"` // default 3
}

// ScheduleDeliver is where a schedule's runs are announced.
type ScheduleDeliver struct {
	Channel  string `json:"channel"`
	Chat     string `json:"chat"`
	Thread   string `json:"thread"`
	ChatType string `json:"chatType"` // dm | group; default group (dm for web)
	Account  string `json:"account"`
}

func (c *Config) applyScheduleDefaults() {
	s := &c.Schedules
	setInt(&s.MinIntervalSeconds, DefaultScheduleMinIntervalSeconds)
	setInt(&s.MaxPerConversation, DefaultScheduleMaxPerConversation)
	setInt(&s.MaxPerSender, DefaultScheduleMaxPerSender)
	setInt(&s.MaxTotal, DefaultScheduleMaxTotal)
	setStr(&s.Timezone, DefaultScheduleTimezone)
	for i := range s.List {
		l := &s.List[i]
		setStr(&l.Timezone, s.Timezone)
		setStr(&l.AgentID, c.DefaultAgentID())
		setStr(&l.CatchUp, DefaultScheduleCatchUp)
		setInt(&l.MaxFailures, DefaultScheduleMaxFailures)
		if l.Deliver.ChatType == "" {
			l.Deliver.ChatType = "group"
			if l.Deliver.Channel == "web" {
				l.Deliver.ChatType = "dm"
			}
		}
	}
}

// ParseEvery parses an interval: a Go duration (90s, 30m, 1h30m) or whole
// days (1d, 2d12h).
func ParseEvery(s string) (time.Duration, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	var days time.Duration
	if i := strings.IndexByte(t, 'd'); i > 0 {
		var n int
		if _, err := fmt.Sscanf(t[:i], "%d", &n); err != nil || fmt.Sprint(n) != t[:i] {
			return 0, fmt.Errorf("%q is not a duration like 90s, 30m, 1h30m or 1d", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		t = t[i+1:]
	}
	var d time.Duration
	if t != "" {
		var err error
		if d, err = time.ParseDuration(t); err != nil {
			return 0, fmt.Errorf("%q is not a duration like 90s, 30m, 1h30m or 1d", s)
		}
	}
	d += days
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration", s)
	}
	return d, nil
}

// ParseAt parses an "at" time: YYYY-MM-DD HH:MM in loc, or RFC 3339.
func ParseAt(s string, loc *time.Location) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.ParseInLocation(ScheduleAtLayout, s, loc); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time like 2026-12-01 09:00", s)
}

var scheduleIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`) })

func (v *validator) schedules() {
	s := v.c.Schedules
	v.atLeast("schedules.minIntervalSeconds", s.MinIntervalSeconds, 1)
	v.atLeast("schedules.maxPerConversation", s.MaxPerConversation, 1)
	v.atLeast("schedules.maxPerSender", s.MaxPerSender, 1)
	v.atLeast("schedules.maxTotal", s.MaxTotal, 1)
	if _, err := time.LoadLocation(s.Timezone); err != nil || s.Timezone == "" || s.Timezone == "Local" {
		v.add("schedules.timezone", "%q is not an IANA timezone like UTC or Europe/Berlin", s.Timezone)
	}
	seen := map[string]bool{}
	for i, l := range s.List {
		p := fmt.Sprintf("schedules.list[%d]", i)
		switch {
		case !scheduleIDRe().MatchString(l.ID):
			v.add(p+".id", "%q must be 1-64 characters of A-Z, a-z, 0-9, _ and -, starting with a letter or digit", l.ID)
		case seen[l.ID]:
			v.add(p+".id", "%q is used twice", l.ID)
		}
		seen[l.ID] = true
		loc, err := time.LoadLocation(l.Timezone)
		if err != nil || l.Timezone == "Local" {
			v.add(p+".timezone", "%q is not an IANA timezone like UTC or Europe/Berlin", l.Timezone)
			loc = time.UTC
		}
		n := 0
		for _, w := range []string{l.Cron, l.Every, l.At} {
			if w != "" {
				n++
			}
		}
		if n != 1 {
			v.add(p, "needs exactly one of cron, every and at (has %d)", n)
		}
		if l.Cron != "" {
			if err := CheckCronInterval(l.Cron, time.Duration(s.MinIntervalSeconds)*time.Second); err != nil {
				v.add(p+".cron", "%v (schedules.minIntervalSeconds is %ds)", err, s.MinIntervalSeconds)
			}
		}
		if l.Every != "" {
			if d, err := ParseEvery(l.Every); err != nil {
				v.add(p+".every", "%v", err)
			} else if d < time.Duration(s.MinIntervalSeconds)*time.Second {
				v.add(p+".every", "%s is shorter than schedules.minIntervalSeconds (%ds)", l.Every, s.MinIntervalSeconds)
			}
		}
		if l.At != "" {
			if _, err := ParseAt(l.At, loc); err != nil {
				v.add(p+".at", "%v", err)
			}
		}
		if _, ok := v.c.Agent(l.AgentID); !ok {
			v.add(p+".agentId", "%q is not an agent of agents.list", l.AgentID)
		}
		if strings.TrimSpace(l.Task) == "" {
			v.add(p+".task", "missing: what the agent should do at each firing")
		}
		if l.Deliver.Channel == "" {
			v.add(p+".deliver.channel", "missing: the channel to announce into (%s)", oneOf(ChannelNames()))
		} else {
			v.enum(p+".deliver.channel", l.Deliver.Channel, ChannelNames())
		}
		if l.Deliver.Chat == "" {
			v.add(p+".deliver.chat", "missing: the chat to announce into (Slack channel id, Telegram chat id, Matrix room id or web client id)")
		}
		v.enum(p+".deliver.chatType", l.Deliver.ChatType, chatTypes)
		v.enum(p+".catchUp", l.CatchUp, CatchUpPolicies)
		v.atLeast(p+".maxFailures", l.MaxFailures, 1)
	}
}
