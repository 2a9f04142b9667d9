package command

import (
	"errors"
	"strconv"
	"strings"
	"unicode"
)

// Command names.
const (
	NameSubagents = "subagents"
	NameStop      = "stop"
	NameApprove   = "approve"
	NameDeny      = "deny"
	NameStatus    = "status"
	NameHelp      = "help"
	NameNew       = "new"
	NameReset     = "reset"
	NameCompact   = "compact"
	NameModel     = "model"
	NameThink     = "think"
	NameSchedule  = "schedule"
	NameUsage     = "usage"
	NameFocus     = "focus"
	NameUnfocus   = "unfocus"
	NameMemory    = "memory"
)

// /subagents actions.
const (
	ActionList = "list"
	ActionStop = "stop"
	ActionLog  = "log"
	ActionInfo = "info"
	ActionSend = "send"
)

// Log limits of /subagents log.
const (
	DefaultLogLimit = 20
	MaxLogLimit     = 200
)

// TargetAll is the target of /subagents stop all.
const TargetAll = "all"

// ErrNotCommand is returned by Parse for text that is not one of this
// package's commands (it belongs to the agent).
var ErrNotCommand = errors.New("not a command")

// UsageError is returned by Parse for a command with bad arguments; its
// message is the one-line usage to reply with.
type UsageError struct{ Usage string }

func (e *UsageError) Error() string { return e.Usage }

// One-line usages.
const (
	usageSubagents = "Usage: /subagents list|stop|log|info|send"
	usageStop      = "Usage: /subagents stop <id|#|all>"
	usageLog       = "Usage: /subagents log <id|#> [limit] [tools]"
	usageInfo      = "Usage: /subagents info <id|#>"
	usageSend      = "Usage: /subagents send <id|#> <message>"
	usageApprove   = "Usage: /approve <code>"
	usageDeny      = "Usage: /deny <code>"
	usageModel     = "Usage: /model [provider/model|default]"
	usageThink     = "Usage: /think [off|low|medium|high|default]"
	usageFocus     = "Usage: /focus <id|#|label> — in a thread or forum topic: the thread then talks to that subagent"
)

// ArgDefault clears a conversation's /model or /think choice.
const ArgDefault = "default"

// Command is one parsed chat command.
type Command struct {
	Name    string // NameSubagents, NameStop, NameApprove, NameDeny, NameStatus or NameHelp
	Action  string // for /subagents: ActionList, ActionStop, ActionLog, ActionInfo or ActionSend
	Target  string // the run as typed: list number, #n, runId prefix, child session key, label, "last"; TargetAll for stop all
	Limit   int    // log: how many lines, 1..MaxLogLimit
	Tools   bool   // log: include tool calls and results
	Message string // send: the message, inner whitespace kept
	Code    string // approve, deny: the approval code
	Arg     string // compact: the focus (inner whitespace kept); model: the ref; think: the level (lower case); "" = show
}

// String renders c in canonical form; Parse(c.String()) gives c back.
func (c Command) String() string {
	switch c.Name {
	case NameSubagents:
		s := "/subagents " + c.Action
		switch c.Action {
		case ActionStop, ActionInfo:
			s += " " + c.Target
		case ActionLog:
			s += " " + c.Target + " " + strconv.Itoa(c.Limit)
			if c.Tools {
				s += " tools"
			}
		case ActionSend:
			s += " " + c.Target + " " + c.Message
		}
		return s
	case NameApprove, NameDeny:
		return "/" + c.Name + " " + c.Code
	case NameFocus:
		return "/focus " + c.Target
	case NameCompact, NameModel, NameThink, NameSchedule, NameMemory:
		if c.Arg != "" {
			return "/" + c.Name + " " + c.Arg
		}
	}
	return "/" + c.Name
}

// names maps accepted command names (lower case) to canonical ones.
var names = map[string]string{
	"subagents": NameSubagents,
	"subagent":  NameSubagents,
	"stop":      NameStop,
	"approve":   NameApprove,
	"deny":      NameDeny,
	"status":    NameStatus,
	"help":      NameHelp,
	"commands":  NameHelp,
	"new":       NameNew,
	"reset":     NameReset,
	"compact":   NameCompact,
	"model":     NameModel,
	"think":     NameThink,
	"thinking":  NameThink,
	"schedule":  NameSchedule,
	"schedules": NameSchedule,
	"usage":     NameUsage,
	"spend":     NameUsage,
	"focus":     NameFocus,
	"unfocus":   NameUnfocus,
	"memory":    NameMemory,
	"memories":  NameMemory,
}

// actions maps accepted /subagents actions (lower case) to canonical ones.
var actions = map[string]string{
	"list":    ActionList,
	"ls":      ActionList,
	"stop":    ActionStop,
	"kill":    ActionStop,
	"log":     ActionLog,
	"logs":    ActionLog,
	"history": ActionLog,
	"info":    ActionInfo,
	"inspect": ActionInfo,
	"send":    ActionSend,
	"steer":   ActionSend,
}

// IsCommand reports whether text is a command this package handles (after
// normalisation), including one with bad arguments (it gets a usage reply).
func IsCommand(text string) bool {
	_, err := Parse(text)
	return !errors.Is(err, ErrNotCommand)
}

// Parse is the parser shared by all channels. It accepts a leading "/",
// a bot-name suffix ("/subagents@herald_bot list"), leading mentions
// ("<@U123> /stop", "@herald /stop"), any whitespace, and command and
// action names in any case. It returns ErrNotCommand for anything else, and
// a *UsageError for one of its commands with missing or bad arguments.
func Parse(text string) (Command, error) {
	tok, rest := next(text)
	for i := 0; i < 2 && isMention(tok); i++ {
		tok, rest = next(rest)
	}
	if len(tok) < 2 || tok[0] != '/' {
		return Command{}, ErrNotCommand
	}
	name, _, _ := strings.Cut(tok[1:], "@")
	c := Command{Name: names[strings.ToLower(name)]}
	switch c.Name {
	case "":
		return Command{}, ErrNotCommand
	case NameSubagents:
		return parseSubagents(c, rest)
	case NameApprove, NameDeny:
		code, _ := next(rest)
		c.Code = strings.Trim(code, "`\"'“”‘’")
		if c.Code == "" {
			if c.Name == NameApprove {
				return c, &UsageError{usageApprove}
			}
			return c, &UsageError{usageDeny}
		}
	case NameCompact, NameSchedule, NameMemory:
		c.Arg = strings.TrimFunc(rest, unicode.IsSpace)
	case NameFocus:
		// A label may have spaces: the whole rest names the subagent.
		c.Target = strings.Join(strings.Fields(rest), " ")
		if c.Target == "" {
			return c, &UsageError{usageFocus}
		}
	case NameModel, NameThink:
		arg, more := next(rest)
		if strings.TrimSpace(more) != "" {
			if c.Name == NameModel {
				return c, &UsageError{usageModel}
			}
			return c, &UsageError{usageThink}
		}
		c.Arg = arg
		if c.Name == NameThink || strings.EqualFold(arg, ArgDefault) {
			c.Arg = strings.ToLower(arg)
		}
	}
	// /stop, /status, /help, /new and /reset ignore trailing words;
	// /approve and /deny ignore a reason after the code.
	return c, nil
}

func parseSubagents(c Command, rest string) (Command, error) {
	act, rest := next(rest)
	if act == "" {
		c.Action = ActionList
		return c, nil
	}
	c.Action = actions[strings.ToLower(act)]
	if c.Action == "" {
		return c, &UsageError{usageSubagents}
	}
	if c.Action == ActionList {
		return c, nil
	}
	c.Target, rest = next(rest)
	switch c.Action {
	case ActionStop:
		if c.Target == "" {
			return c, &UsageError{usageStop}
		}
		if strings.EqualFold(c.Target, TargetAll) {
			c.Target = TargetAll
		}
	case ActionInfo:
		if c.Target == "" {
			return c, &UsageError{usageInfo}
		}
	case ActionLog:
		if c.Target == "" {
			return c, &UsageError{usageLog}
		}
		c.Limit = DefaultLogLimit
		for {
			var opt string
			if opt, rest = next(rest); opt == "" {
				break
			}
			if strings.EqualFold(opt, "tools") {
				c.Tools = true
				continue
			}
			n, err := strconv.Atoi(opt)
			if err != nil || n < 1 {
				return c, &UsageError{usageLog}
			}
			c.Limit = min(n, MaxLogLimit)
		}
	case ActionSend:
		c.Message = strings.TrimFunc(rest, unicode.IsSpace)
		if c.Target == "" || c.Message == "" {
			return c, &UsageError{usageSend}
		}
	}
	return c, nil
}

// next splits off the first whitespace-separated token of s.
func next(s string) (tok, rest string) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// isMention reports whether tok addresses the bot before a command: a Slack
// "<@U123>" or a plain "@name".
func isMention(tok string) bool {
	return len(tok) > 1 && (tok[0] == '@' || strings.HasPrefix(tok, "<@") && strings.HasSuffix(tok, ">"))
}
