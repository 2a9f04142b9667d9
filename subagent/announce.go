package subagent

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// AnnounceSkip is the reply by which a child asks that nothing be posted.
const AnnounceSkip = "ANNOUNCE_SKIP"

// announcePromptStart begins the announce step's prompt.
const announcePromptStart = "Announce step: your run has ended."

// IsAnnouncePrompt reports whether a user message of a child's transcript
// is the announce step's prompt (Herald's, not the requester's words: logs
// show it as the step, not as a user line).
func IsAnnouncePrompt(text string) bool {
	return strings.HasPrefix(strings.TrimSpace(text), announcePromptStart)
}

// announcePrompt is the user message of the announce step, run inside the
// child session after its run ended.
const announcePrompt = announcePromptStart + ` Write the message that will be posted back to the requester, in exactly this form:

Result:
<the result of your task>

Notes:
<caveats, errors, or (none)>

Reply with exactly ANNOUNCE_SKIP if nothing should be posted.`

// Announce is what the announce template is filled from.
type Announce struct {
	Status     string // success|error|timeout|unknown
	Label      string
	Task       string
	Result     string
	Notes      string
	Runtime    time.Duration
	TokensIn   int64
	TokensOut  int64
	CostUSD    float64 // used when HasCost
	HasCost    bool
	SessionKey string
	SessionID  string
	Transcript string
	// Schedule is "<id> @ <due, RFC 3339 UTC>" for a scheduled run's
	// firing (SPEC §19); "" otherwise.
	Schedule string
}

// Render fills the announce template of SPEC §6.
func (a Announce) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Status: %s\n", a.Status)
	fmt.Fprintf(&b, "Task: %s\n\n", TaskTitle(a.Label, a.Task))
	b.WriteString("Result:\n")
	b.WriteString(orDefault(a.Result, "(not available)"))
	b.WriteString("\n\nNotes:\n")
	b.WriteString(orDefault(a.Notes, "(none)"))
	b.WriteString("\n\n")
	stats := []string{
		"runtime " + FormatRuntime(a.Runtime),
		fmt.Sprintf("tokens %s (in %s / out %s)", FormatTokens(a.TokensIn+a.TokensOut), FormatTokens(a.TokensIn), FormatTokens(a.TokensOut)),
	}
	if a.HasCost {
		stats = append(stats, "est "+FormatCost(a.CostUSD))
	}
	stats = append(stats, "sessionKey "+a.SessionKey, "sessionId "+a.SessionID, "transcript "+a.Transcript)
	if a.Schedule != "" {
		stats = append(stats, "schedule "+a.Schedule)
	}
	b.WriteString("Stats: " + strings.Join(stats, " • "))
	return b.String()
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return strings.TrimSpace(s)
}

// TaskTitle is the label, else the task cut to 72 characters with "…".
func TaskTitle(label, task string) string {
	if l := strings.TrimSpace(label); l != "" {
		return l
	}
	return Truncate(strings.Join(strings.Fields(task), " "), 72)
}

// Truncate cuts s to at most n runes, ending in "…" when cut.
func Truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// FormatRuntime renders a duration as Ns, MmSs or HhMm.
func FormatRuntime(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%dm", s/3600, (s%3600)/60)
	}
}

// FormatTokens renders a token count: as is up to 999, then 1.2k, 3.4m.
func FormatTokens(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d", n)
	case n < 999_950:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprintf("%.1fm", float64(n)/1e6)
	}
}

// FormatCost renders USD: $x.xx from one cent up, else $x.xxxx.
func FormatCost(usd float64) string {
	if usd >= 0.01 {
		return fmt.Sprintf("$%.2f", usd)
	}
	return fmt.Sprintf("$%.4f", usd)
}

// ParseAnnounce splits the announce step's reply into result and notes. A
// reply without the markers is all result.
func ParseAnnounce(reply string) (result, notes string) {
	text := strings.TrimSpace(reply)
	rs, re := marker(text, "Result:")
	ns, ne := marker(text, "Notes:")
	switch {
	case rs < 0 && ns < 0:
		return text, ""
	case ns < 0:
		return strings.TrimSpace(text[re:]), ""
	case rs < 0:
		return strings.TrimSpace(text[:ns]), strings.TrimSpace(text[ne:])
	case rs < ns:
		return strings.TrimSpace(text[re:ns]), strings.TrimSpace(text[ne:])
	default:
		return strings.TrimSpace(text[re:]), strings.TrimSpace(text[ne:rs])
	}
}

// marker finds name at the start of a line, bare or bold (**Result:**), and
// returns where it starts and ends, or -1, -1.
func marker(text, name string) (start, end int) {
	for _, m := range []string{"**" + name + "**", name} {
		for i := 0; ; {
			j := strings.Index(text[i:], m)
			if j < 0 {
				break
			}
			j += i
			if j == 0 || text[j-1] == '\n' {
				return j, j + len(m)
			}
			i = j + len(m)
		}
	}
	return -1, -1
}
