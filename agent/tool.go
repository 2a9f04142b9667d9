package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/heraldhq/herald/channels"
)

// Tool groups used by security.toolPolicy.
const (
	GroupSessions = "sessions"
	GroupFiles    = "files"
	GroupExec     = "exec"
	GroupWeb      = "web"
	GroupACP      = "acp" // permission requests of ACP agents (SPEC §26)
	GroupMCP      = "mcp" // tools of MCP servers (mcp__<server>__<tool>)
)

// ErrBadArguments is wrapped by every error about a tool call's
// arguments: the model's mistake, told back to it to correct.
var ErrBadArguments = errors.New("bad arguments")

// DecodeArgs reads a tool call's arguments raw (empty or null: {}) into v,
// refusing unknown fields; the error names the tool, wraps
// ErrBadArguments and shows example, a valid arguments object.
func DecodeArgs(tool string, raw json.RawMessage, v any, example string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%s: %w: %v; expected %s", tool, ErrBadArguments, err, example)
	}
	return nil
}

// JSONResult is v as a tool's JSON result.
func JSONResult(tool string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%s: encode result: %w", tool, err)
	}
	return string(b), nil
}

// ObjectSchema is the JSON Schema of a tool's arguments: an object with
// props (name → property schema), the required ones, and no others.
func ObjectSchema(props map[string]any, required ...string) json.RawMessage {
	b, err := json.Marshal(map[string]any{"type": "object", "properties": props, "required": append([]string{}, required...),
		"additionalProperties": false})
	if err != nil { // property schemas are plain maps and strings
		return json.RawMessage(`{"type":"object"}`)
	}
	return b
}

// CallContext tells a tool who is calling.
type CallContext struct {
	SessionKey string
	SessionID  string
	RootKey    string // the top-level requester session this call descends from
	AgentID    string
	RunID      string // empty for a top-level session turn
	Depth      int    // 0 = top-level session, 1 = child, ...
	// Workspace is the absolute path of the conversation workspace
	// (<agent workspace>/conversations/<id>/, SPEC §17): where file tools
	// write and exec runs. A sub-agent or delegate run gets its requester
	// conversation's.
	Workspace string
	// AgentWorkspace is the agent workspace itself: the bootstrap files
	// (AGENTS.md, SOUL.md, …) and files from before per-conversation
	// workspaces. Tools may read it (as a fallback under Workspace) but
	// never write it. "" = no such layer.
	AgentWorkspace string
	// ReadOnlyDirs are further folders (absolute) the file tools may read
	// by absolute path and exec sees read-only, never written: the skills
	// folders of skills.paths (SPEC §28).
	ReadOnlyDirs []string
	Origin       channels.Origin
	Model        string // "provider/model" the caller runs on
	Thinking     string // the caller's thinking level ("" = none)
	CallID       string // the id of the tool call being run (set per call)
	// Turn names the turn making the call ("intake:<id>" for a top-level
	// turn, "run:<id>" for a sub-agent run): the children it spawns with
	// announce "parent" form one group that wakes it once (SPEC §23).
	Turn  string
	Tools []string // names of the tools the caller has in this turn
}

// Repeatable is implemented by tools whose call may be made again when a
// run or turn cut by a crash resumes with the call unanswered (SPEC §25):
// read-only tools (read_file, list_files, web_fetch, web_search), MCP
// tools annotated readOnlyHint or idempotentHint, and sessions_spawn
// (idempotent per call id: a repeated call answers with the run the first
// one made). Any other call may have acted already: it is answered with
// the interrupted result and the model decides.
type Repeatable interface {
	Repeatable() bool
}

// IsRepeatable reports whether t is marked safe to call again.
func IsRepeatable(t Tool) bool {
	r, ok := t.(Repeatable)
	return ok && r.Repeatable()
}

// Preparer is implemented by a tool whose consecutive calls in one model
// response share work: the loop gives Prepare those of them that every
// check allowed (policy, approval), in order, before it runs each with
// Call as usual. Prepare may do each call's work ahead, together (the
// spawns of sessions_spawn calls recorded in one store transaction); Call
// must then give each call exactly the result it would have had alone.
// Every call given to Prepare is then made with Call, once — unless the
// turn is cut before (a panic in an earlier call): Done is called with the
// same calls once they were made or the turn was cut, so that what Prepare
// did for a call never made is not left behind.
type Preparer interface {
	Prepare(calls []PreparedCall)
	Done(calls []PreparedCall)
}

// PreparedCall is one call given to Preparer.Prepare: its context (within
// the call's span), its CallContext (CallID set; the turn's record of the
// call, not to be changed) and its arguments. CC is a pointer: a model
// response's 100 spawns are 100 PreparedCalls, and a CallContext is ~0.4 KB.
type PreparedCall struct {
	Ctx  context.Context
	CC   *CallContext
	Args json.RawMessage
}

// Tool is one function the model may call. Call returns the result content
// (normally a JSON object); a returned error becomes an error result the
// model can read, never a failed run.
type Tool interface {
	Spec() ToolSpec
	Group() string // one of the Group* constants, or "" for none
	Call(ctx context.Context, cc CallContext, args json.RawMessage) (string, error)
}

// Registry is a named set of tools. Each tool's Spec is taken once, when
// it is added: a registry lives for a turn or a run, whose model calls
// each send every spec (Spec renders descriptions and schemas). The tools
// are kept sorted by name, so the specs go out in name order without a
// sort, and a run's registries are two slices each rather than a map.
// Specs hands out the registry's own slice: a request in flight keeps no
// copy of its own (docs/performance.md, memory per call in flight).
type Registry struct {
	tools []Tool     // sorted by name, names unique
	specs []ToolSpec // specs[i] is tools[i]'s
	// handed: specs was handed out by Specs; Add writes to a copy.
	handed atomic.Bool
	// frozen: the registry is shared by turns or runs (Freeze): Add
	// panics rather than change it under them.
	frozen bool
}

// Freeze marks r as shared: from now on it is read only, and Add panics.
// A caller that wants more tools in it adds them to a Clone. It returns r.
func (r *Registry) Freeze() *Registry {
	r.frozen = true
	return r
}

// NewRegistry returns a registry holding tools.
func NewRegistry(tools ...Tool) *Registry {
	r := &Registry{tools: make([]Tool, 0, len(tools)+8), specs: make([]ToolSpec, 0, len(tools)+8)}
	for _, t := range tools {
		r.Add(t)
	}
	return r
}

// find returns where name is, or would be inserted, in r.specs.
func (r *Registry) find(name string) (int, bool) {
	return slices.BinarySearchFunc(r.specs, name, func(e ToolSpec, name string) int { return strings.Compare(e.Name, name) })
}

// Add registers t, replacing a tool of the same name. A slice Specs
// returned before is not changed.
func (r *Registry) Add(t Tool) {
	if r.frozen {
		panic("agent: Add to a shared (frozen) tool registry; add to a Clone")
	}
	spec := t.Spec()
	spec.Description = internDescription(spec.Description)
	if r.handed.Load() {
		r.specs = slices.Clone(r.specs)
		r.handed.Store(false)
	}
	i, ok := r.find(spec.Name)
	if ok {
		r.tools[i] = t
		r.specs[i] = spec
		return
	}
	r.tools = slices.Insert(r.tools, i, t)
	r.specs = slices.Insert(r.specs, i, spec)
}

// Get returns the named tool.
func (r *Registry) Get(name string) (Tool, bool) {
	if i, ok := r.find(name); ok {
		return r.tools[i], true
	}
	return nil, false
}

// Names returns the tool names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, len(r.specs))
	for i, e := range r.specs {
		names[i] = e.Name
	}
	return names
}

// Filter returns a new registry with the tools keep accepts. A run's
// registry lives as long as the run: it is made at its size.
func (r *Registry) Filter(keep func(name string, t Tool) bool) *Registry {
	var buf [64]int
	kept := buf[:0]
	for i, t := range r.tools {
		if keep(r.specs[i].Name, t) {
			kept = append(kept, i)
		}
	}
	out := &Registry{tools: make([]Tool, len(kept)), specs: make([]ToolSpec, len(kept))}
	for j, i := range kept {
		out.tools[j], out.specs[j] = r.tools[i], r.specs[i]
	}
	return out
}

// Clone is a new registry of r's tools, with the specs r read: Add on
// either does not change the other. It has room for a few more tools,
// as a new registry does.
func (r *Registry) Clone() *Registry {
	c := &Registry{tools: make([]Tool, len(r.tools), len(r.tools)+8), specs: make([]ToolSpec, len(r.specs), len(r.specs)+8)}
	copy(c.tools, r.tools)
	copy(c.specs, r.specs)
	return c
}

// Specs returns the tool specs in name order. The slice is the
// registry's: it must not be written to (Add makes a new one).
func (r *Registry) Specs() []ToolSpec {
	r.handed.Store(true)
	return slices.Clip(r.specs)
}

// maxDescriptions bounds the shared tool descriptions; past it a
// description is kept as given.
const maxDescriptions = 4096

// descriptions holds one copy of each tool description seen: tools whose
// description is rendered from settings (exec, list_files, web_fetch,
// memory_write) render it for every run's registry, and each run kept its
// own copy (~1.4 KB per sub-agent run in flight).
var descriptions = struct {
	sync.Mutex
	m map[string]string
}{m: make(map[string]string)}

func internDescription(d string) string {
	if d == "" {
		return d
	}
	descriptions.Lock()
	defer descriptions.Unlock()
	if s, ok := descriptions.m[d]; ok {
		return s
	}
	if len(descriptions.m) < maxDescriptions {
		descriptions.m[d] = d
	}
	return d
}
