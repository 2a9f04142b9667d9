package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/titanous/json5"
)

// ChannelOptions is the config section channels.<name> of a registered
// channel module (SPEC §21): a pointer to the module's own struct, decoded
// strictly from the file (unknown keys are errors, ${VAR} substituted).
// The module registers its type with channels.Register; this package knows
// no channel by name except the web chat, which the gateway serves itself.
type ChannelOptions interface {
	// Common is the keys every platform channel shares (SPEC §9): enabled,
	// streaming, allowFrom, groupPolicy, groups. Their defaults and
	// validation are applied here, once for every channel.
	Common() *ChannelCommon
	// Defaults fills the channel's own unset values.
	Defaults()
	// Validate reports the channel's own problems through s, with key
	// paths relative to channels.<name>.
	Validate(s *Section)
}

// ApproverChecker is implemented by the options of a channel whose user
// ids may be listed in security.approvers.<name>: it returns what an id
// must be, or "" when id is one.
type ApproverChecker interface {
	CheckApprover(id string) string
}

// ChannelCommon is the part every platform channel's section shares
// (SPEC §9); a module's options struct embeds it.
type ChannelCommon struct {
	Enabled   bool   `json:"enabled"`
	Streaming string `json:"streaming"` // edit (default) | off: the reply shown while it is written (SPEC §16)
	Access
}

// channelRegistry is the options type of every registered channel.
var channelRegistry = struct {
	sync.RWMutex
	news map[string]func() ChannelOptions
}{news: map[string]func() ChannelOptions{}}

// RegisterChannel records the options type of channel name; new returns a
// fresh zero value (a pointer). channels.Register calls it: use that.
// Registering a name twice, or "web", panics (a programming error found at
// start-up, as with database/sql drivers).
func RegisterChannel(name string, new func() ChannelOptions) {
	channelRegistry.Lock()
	defer channelRegistry.Unlock()
	if name == "web" || !isPlainKey(name) || strings.ContainsAny(name, "-") {
		panic(fmt.Sprintf("config: channel name %q is reserved or not a plain key", name))
	}
	if _, dup := channelRegistry.news[name]; dup {
		panic(fmt.Sprintf("config: channel %q registered twice", name))
	}
	channelRegistry.news[name] = new
}

// UnregisterChannel removes a registered channel (tests that register a
// throwaway module).
func UnregisterChannel(name string) {
	channelRegistry.Lock()
	defer channelRegistry.Unlock()
	delete(channelRegistry.news, name)
}

// RegisteredChannels lists the registered channel names, sorted (the web
// chat is not among them).
func RegisteredChannels() []string {
	channelRegistry.RLock()
	defer channelRegistry.RUnlock()
	names := make([]string, 0, len(channelRegistry.news))
	for n := range channelRegistry.news {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func newChannelOptions(name string) (ChannelOptions, bool) {
	channelRegistry.RLock()
	defer channelRegistry.RUnlock()
	f, ok := channelRegistry.news[name]
	if !ok {
		return nil, false
	}
	return f(), true
}

// ChannelNames lists every channel a config may name: the registered ones
// and the web chat.
func ChannelNames() []string { return append(RegisteredChannels(), "web") }

// Channels configures each chat channel: the web chat, and the section of
// every registered channel module by its name.
type Channels struct {
	Web Web `json:"web"`

	mods map[string]ChannelOptions // registered channels' sections; every registered one after ApplyDefaults
}

var channelsType = reflect.TypeOf(Channels{})

// Options is the section channels.<name> of a registered channel (its
// module's type; nil when name is not registered).
func (c *Channels) Options(name string) ChannelOptions {
	if o, ok := c.mods[name]; ok {
		return o
	}
	if o, ok := newChannelOptions(name); ok {
		// A config built by hand and not defaulted: the defaults of an
		// absent section.
		o.Defaults()
		o.Common().defaults()
		return o
	}
	return nil
}

// SetOptions replaces the section of a registered channel (tests and
// `herald init` build configs by hand).
func (c *Channels) SetOptions(name string, o ChannelOptions) {
	if c.mods == nil {
		c.mods = map[string]ChannelOptions{}
	}
	c.mods[name] = o
}

// Enabled reports whether channel name is on: the web chat by its default
// (on), a registered channel by channels.<name>.enabled.
func (c *Config) ChannelEnabled(name string) bool {
	if name == "web" {
		return c.WebEnabled()
	}
	o := c.Channels.Options(name)
	return o != nil && o.Common().Enabled
}

// EnabledChannels lists the registered channels that are on, sorted.
func (c *Config) EnabledChannels() []string {
	var on []string
	for _, n := range RegisteredChannels() {
		if c.ChannelEnabled(n) {
			on = append(on, n)
		}
	}
	return on
}

// UnmarshalJSON decodes the channels object: web into Web, every other key
// strictly into its registered module's options type.
func (c *Channels) UnmarshalJSON(data []byte) error {
	var raw map[string]json5.RawMessage
	if err := json5.Unmarshal(data, &raw); err != nil {
		return err
	}
	for _, name := range sortedKeys(raw) {
		var dst any
		if name == "web" {
			dst = &c.Web
		} else {
			o, ok := newChannelOptions(name)
			if !ok {
				return fmt.Errorf("unknown channel %q", name)
			}
			c.SetOptions(name, o)
			dst = o
		}
		dec := json5.NewDecoder(bytes.NewReader(raw[name]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(dst); err != nil {
			return fmt.Errorf("channels.%s: %w", name, err)
		}
	}
	return nil
}

// MarshalJSON writes every section (secrets redacted by their type).
func (c Channels) MarshalJSON() ([]byte, error) {
	out := map[string]any{"web": c.Web}
	for n, o := range c.mods {
		out[n] = o
	}
	return json.Marshal(out)
}

// checkChannels is the strict check of the channels object: web and the
// registered channels by their types; any other key is unknown.
func (c *strictChecker) checkChannels(n *node, path string) {
	if n.kind != kindObject {
		c.mismatch(n, path, "an object")
		return
	}
	known := map[string]reflect.Type{"web": reflect.TypeOf(Web{})}
	for _, name := range RegisteredChannels() {
		o, _ := newChannelOptions(name)
		known[name] = reflect.TypeOf(o)
	}
	c.eachMember(n, path, func(m member, p string) {
		t, ok := known[m.key]
		if !ok {
			c.add(m.keyOff, p, "unknown channel %q%s (channels: %s)", m.key, suggest(m.key, known), strings.Join(sortedKeys(known), ", "))
			return
		}
		c.check(m.val, t, p)
	})
}

// walkChannels substitutes variables in every channel's section.
func (e *envExpander) walkChannels(ch *Channels, path string) {
	e.walk(reflect.ValueOf(&ch.Web).Elem(), joinKey(path, "web"))
	for _, name := range sortedKeys(ch.mods) {
		e.walk(reflect.ValueOf(ch.mods[name]), joinKey(path, name))
	}
}

// applyChannelDefaults gives every registered channel a section (the
// defaults of an absent one) and fills its unset values.
func (c *Config) applyChannelDefaults() {
	ch := &c.Channels
	for _, name := range RegisteredChannels() {
		o, ok := ch.mods[name]
		if !ok {
			o, _ = newChannelOptions(name)
			ch.SetOptions(name, o)
		}
		o.Defaults()
		o.Common().defaults()
	}
	if ch.Web.Enabled == nil {
		ch.Web.Enabled = boolp(true)
	}
}

func (cc *ChannelCommon) defaults() {
	a := &cc.Access
	setStr(&a.GroupPolicy, "allowlist")
	for id, g := range a.Groups {
		if g.RequireMention == nil {
			g.RequireMention = boolp(true)
			a.Groups[id] = g
		}
	}
}

// Section reports the problems of one channel's section with key paths
// relative to it ("botToken" → channels.telegram.botToken).
type Section struct {
	v    *validator
	path string
}

// Path is the section's own key path (channels.<name>).
func (s *Section) Path() string { return s.path }

func (s *Section) key(key string) string {
	if key == "" {
		return s.path
	}
	if strings.HasPrefix(key, "[") {
		return s.path + key
	}
	return s.path + "." + key
}

// Add reports a problem at key (relative: "botToken", "groups[\"-1\"]").
func (s *Section) Add(key, format string, args ...any) { s.v.add(s.key(key), format, args...) }

// Enum reports val when it is set and not one of allowed.
func (s *Section) Enum(key, val string, allowed []string) { s.v.enum(s.key(key), val, allowed) }

// HTTPURL reports val when it is set and not an http(s) URL.
func (s *Section) HTTPURL(key, val string) { s.v.httpURL(s.key(key), val) }

// URLPath reports val when it is set and does not start with /.
func (s *Section) URLPath(key, val string) { s.v.urlPath(s.key(key), val) }

// NonNegative reports n when it is below 0.
func (s *Section) NonNegative(key string, n int) { s.v.nonNegative(s.key(key), n) }

// ThreadContext checks a threadContext key (SPEC §21): 0 (off) to
// MaxThreadContext earlier messages.
func (s *Section) ThreadContext(key string, n *int) {
	if n != nil && (*n < 0 || *n > MaxThreadContext) {
		s.Add(key, "%d is out of range: 0 (off) to %d earlier messages", *n, MaxThreadContext)
	}
}

// ThreadContextOr is *n, or DefaultThreadContext when n is nil.
func ThreadContextOr(n *int) int {
	if n == nil {
		return DefaultThreadContext
	}
	return *n
}

// Missing reports that key must be set; what says what to put there.
func (s *Section) Missing(key, what string) { s.Add(key, "missing: %s", what) }

// validateChannels checks every registered channel's section: the common
// keys here, the rest by the module.
func (v *validator) registeredChannels() {
	for _, name := range RegisteredChannels() {
		o := v.c.Channels.Options(name)
		path := joinKey("channels", name)
		cc := o.Common()
		v.enum(path+".streaming", cc.Streaming, streamingModes)
		v.access(path, cc.Access)
		o.Validate(&Section{v: v, path: path})
	}
}

// channelApprover returns the approver id check of channel name.
func channelApprover(name string) (func(string) string, bool) {
	if _, ok := newChannelOptions(name); !ok {
		return nil, false
	}
	o, _ := newChannelOptions(name)
	if a, ok := o.(ApproverChecker); ok {
		return a.CheckApprover, true
	}
	return nil, false
}

// approverChannels lists the channels whose ids security.approvers takes.
func approverChannels() []string {
	var out []string
	for _, n := range RegisteredChannels() {
		if _, ok := channelApprover(n); ok {
			out = append(out, n)
		}
	}
	return out
}
