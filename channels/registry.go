package channels

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/config"
)

// Module is a chat channel as a registered module (SPEC §21). Each package
// under channels/ registers one from its init function; the gateway, the
// config loader, reload, doctor, init and metrics know channels only
// through the registry. The web chat, which the gateway serves on its own
// listener, is the one built-in channel that is not a module.
type Module struct {
	// Name is the channel's name: its config section channels.<name>, the
	// channel of its origins and session keys, its metrics label.
	Name Name
	// Options returns a new, zero options value (a pointer to the module's
	// struct, embedding config.ChannelCommon): the type channels.<name> is
	// decoded into strictly, with its Defaults and Validate.
	Options func() config.ChannelOptions
	// New builds the adapter from its decoded options (deps.Options, of
	// the module's type). It does no I/O: Start connects.
	New func(deps Deps) (Channel, error)
	// Check, if set, is the channel's `herald doctor` check; nil builds the
	// adapter with New and runs its Checker, if it has one.
	Check func(ctx context.Context, deps Deps) []Check
	// Init is what `herald init` asks and writes for the channel; nil = the
	// channel is not offered by init.
	Init *Init
	// Exclusive reports whether only one replica at a time may run the
	// channel with these options (a long poll, a /sync loop); nil = never.
	Exclusive func(opts config.ChannelOptions) bool
	// Uncertain is what the outbox does with a message part whose send
	// outcome is unknown after a crash, when the adapter cannot look it up
	// (no PartFinder): UncertainResend (nil, the default) or UncertainSkip.
	// The returned key names the setting in logs ("uncertainDelivery").
	Uncertain func(opts config.ChannelOptions) (policy Uncertain, key string)
	// Reconnect reports whether a reload from old to next options must
	// rebuild the adapter; nil = whenever they differ. Settings read per
	// delivery (Uncertain) need no reconnect.
	Reconnect func(old, next config.ChannelOptions) bool
	// Verbatim, if set, renders text for the platform so it shows exactly
	// as written (approval requests show a tool call's arguments this way).
	Verbatim func(text string) string
	// MentionOf, if set, renders a mention of a user id the platform shows
	// as the person's name.
	MentionOf func(userID string) string
}

// Uncertain is an uncertain-delivery policy.
type Uncertain string

const (
	UncertainResend Uncertain = "resend" // send the part again (a possible duplicate)
	UncertainSkip   Uncertain = "skip"   // drop the part (a possible gap)
)

// Init is what `herald init` asks and writes for one channel.
type Init struct {
	// Title names the channel in questions ("Slack").
	Title string
	// Secrets are the environment variables the section reads, each with
	// where to find its value.
	Secrets []InitSecret
	// Section is the channels.<name> object written into the new config,
	// in JSON5, indented for its place (4 spaces), credentials as
	// "${VAR}" references.
	Section string
}

// InitSecret is one environment variable a channel's section reads.
type InitSecret struct {
	Var  string // SLACK_BOT_TOKEN
	Hint string // where to get it
}

// Deps is what a module's constructor and check get: the few things an
// adapter needs, nothing of the gateway.
type Deps struct {
	// Options is the channel's decoded, defaulted and validated section
	// (the module's own type).
	Options config.ChannelOptions
	// Logger is the channel's named logger.
	Logger *zap.Logger
	// State is the channel's own namespaced key-value store in the
	// gateway's state (resume state: an update offset, a sync token); keys
	// are stored under "<name>.". Doctor hands a memory store.
	State KV
	// HTTPClient, if set, is used for the platform's API (tests); nil =
	// the adapter's default.
	HTTPClient *http.Client
	// SQL opens a handle on the gateway's state database for a channel
	// whose library keeps tables of its own there (the Matrix crypto
	// store); the channel closes it. Nil where there is no state (doctor).
	SQL func() (SQLDB, error)
	// Bound, if set, reports whether the thread at o is bound to a
	// sub-agent (SPEC §24): an adapter counts such a thread as one the bot
	// is in (§9's mention rule). Nil where there is no gateway (doctor).
	Bound func(ctx context.Context, o Origin) bool
}

// SQLDB is a database/sql handle on the gateway's state database: Dialect
// is "sqlite" or "postgres"; Close releases what the handle holds (never
// the gateway's store).
type SQLDB struct {
	DB      *sql.DB
	Dialect string
	Close   func() error
}

// KV is a channel's namespaced key-value store: its keys never meet
// another channel's or the gateway's.
type KV interface {
	Get(ctx context.Context, key string) (value string, found bool, err error)
	Set(ctx context.Context, key, value string) error
	// Claim stores value under key unless key has one; it reports whether
	// it stored it (exactly one of two racing callers gets true).
	Claim(ctx context.Context, key, value string) (bool, error)
	// DeleteBefore deletes the values under keys starting with prefix last
	// set before t, and says how many.
	DeleteBefore(ctx context.Context, prefix string, t time.Time) (int64, error)
}

var registry = struct {
	sync.RWMutex
	mods map[Name]*Module
}{mods: map[Name]*Module{}}

// Register records a channel module; each channel package calls it from
// its init function. A second module of the same name, or one without
// Name, Options or New, panics: a programming error found at start-up.
func Register(m Module) {
	if m.Name == "" || m.Options == nil || m.New == nil {
		panic(fmt.Sprintf("channels: module %q needs Name, Options and New", m.Name))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.mods[m.Name]; dup {
		panic(fmt.Sprintf("channels: module %q registered twice", m.Name))
	}
	config.RegisterChannel(string(m.Name), m.Options)
	registry.mods[m.Name] = &m
}

// Unregister removes a module (tests that register a throwaway one).
func Unregister(name Name) {
	registry.Lock()
	defer registry.Unlock()
	delete(registry.mods, name)
	config.UnregisterChannel(string(name))
}

// Lookup returns the registered module of name.
func Lookup(name Name) (*Module, bool) {
	registry.RLock()
	defer registry.RUnlock()
	m, ok := registry.mods[name]
	return m, ok
}

// Modules lists the registered modules by name.
func Modules() []*Module {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]*Module, 0, len(registry.mods))
	for _, m := range registry.mods {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *Module) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out
}

// UncertainPolicy is the module's uncertain-delivery policy for opts and
// the key that sets it ("" when the module has no such setting).
func (m *Module) UncertainPolicy(opts config.ChannelOptions) (Uncertain, string) {
	if m.Uncertain == nil {
		return UncertainResend, ""
	}
	return m.Uncertain(opts)
}

// IsExclusive reports whether one replica at a time may run the channel.
func (m *Module) IsExclusive(opts config.ChannelOptions) bool {
	return m.Exclusive != nil && m.Exclusive(opts)
}

// MemoryKV is a KV in memory (doctor, tests).
type MemoryKV struct {
	mu sync.Mutex
	m  map[string]memoryValue
}

type memoryValue struct {
	v  string
	at time.Time
}

var _ KV = (*MemoryKV)(nil)

func (k *MemoryKV) Get(_ context.Context, key string) (string, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	return v.v, ok, nil
}

func (k *MemoryKV) Set(_ context.Context, key, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]memoryValue{}
	}
	k.m[key] = memoryValue{value, time.Now()}
	return nil
}

func (k *MemoryKV) Claim(_ context.Context, key, value string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[key]; ok {
		return false, nil
	}
	if k.m == nil {
		k.m = map[string]memoryValue{}
	}
	k.m[key] = memoryValue{value, time.Now()}
	return true, nil
}

func (k *MemoryKV) DeleteBefore(_ context.Context, prefix string, t time.Time) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var n int64
	for key, v := range k.m {
		if strings.HasPrefix(key, prefix) && v.at.Before(t) {
			delete(k.m, key)
			n++
		}
	}
	return n, nil
}

// SameOptions reports whether two option values are equal (reload's
// default test for a reconnect).
func SameOptions(a, b config.ChannelOptions) bool { return reflect.DeepEqual(a, b) }

// ChangedKeys lists the keys of a section whose values differ between a
// and b, sorted ("uncertainDelivery"); a secret's change shows only when
// its redacted form differs.
func ChangedKeys(a, b config.ChannelOptions) []string {
	var ma, mb map[string]json.RawMessage
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil || json.Unmarshal(ja, &ma) != nil || json.Unmarshal(jb, &mb) != nil {
		return nil
	}
	var keys []string
	for k, v := range ma {
		if !bytes.Equal(v, mb[k]) {
			keys = append(keys, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// NeedsReconnect reports whether a reload from old to next must rebuild the
// channel's adapter: it was turned on or off, or (while on) its options
// changed in a way its Reconnect says matters.
func (m *Module) NeedsReconnect(old, next config.ChannelOptions) bool {
	oldOn, nextOn := old.Common().Enabled, next.Common().Enabled
	switch {
	case oldOn != nextOn:
		return true
	case !nextOn:
		return false
	case m.Reconnect != nil:
		return m.Reconnect(old, next)
	}
	return !SameOptions(old, next)
}
