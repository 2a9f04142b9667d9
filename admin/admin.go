package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// Store is what the console reads and changes in the state: every replica's
// rows, so an action on another replica's item works through it.
type Store interface {
	store.Sessions
	store.Runs
	store.Turns
	store.Outbox
	store.Approvals
	store.Schedules
	store.Spend
	store.Transcripts
	store.Leases
}

// Live is the running gateway as the console sees it: what only the
// process knows, and the actions that need it. The gateway implements it.
type Live interface {
	// Status is the overview's live part: channels, MCP servers, ACP
	// agents, cluster members, lanes, version.
	Status(ctx context.Context) Status
	// StopRun stops a run and the runs below it on whichever replica they
	// run; it returns how many live runs were stopped.
	StopRun(ctx context.Context, runID string) int
	// SendRun steers a run as sessions_send does and waits for its reply.
	SendRun(ctx context.Context, run *store.Run, message string) SendResult
	// Schedule pauses, resumes, removes or runs a schedule now.
	Schedule(ctx context.Context, id, action string) (string, error)
	// WakeOutbox asks for a delivery pass (an item was retried).
	WakeOutbox()
	// Budgets are the configured spend limits.
	Budgets() config.Budgets
	// Changed returns a channel that receives when runs, the outbox or the
	// intake changed here, and a function that ends the subscription.
	Changed() (<-chan struct{}, func())
}

// SendResult is sessions_send's result.
type SendResult struct {
	Status string `json:"status"` // ok | accepted | timeout | error | forbidden
	Reply  string `json:"reply,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Status is the overview's live part (SPEC §27).
type Status struct {
	Version  string    `json:"version"`
	Replica  string    `json:"replica"`
	Channels []Channel `json:"channels"`
	MCP      []any     `json:"mcp"`
	ACP      []any     `json:"acp"`
	Cluster  []Member  `json:"cluster"`
	Lanes    []Lane    `json:"lanes"`
}

// Channel is one chat channel's state.
type Channel struct {
	Name        string    `json:"name"`
	State       string    `json:"state"` // up | down | standby
	LastEventAt time.Time `json:"lastEventAt,omitzero"`
	Error       string    `json:"error,omitempty"`
}

// ACPAgent is one configured ACP coding agent (SPEC §26): its id, the
// command it runs and whether its sandbox has network; `herald doctor`
// starts it to say more.
type ACPAgent struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	Network bool   `json:"network"`
}

// Member is one live replica with the leases it holds.
type Member struct {
	ID     string   `json:"id"`
	Leases []string `json:"leases"`
	Self   bool     `json:"self,omitempty"`
}

// Lane is one lane's depth.
type Lane struct {
	Name    string `json:"name"`
	Running int    `json:"running"`
	Queued  int    `json:"queued"`
}

// Options configure the console.
type Options struct {
	// Token returns gateway.admin.token as the current config has it (""
	// = none: only loopback requests, not through a proxy, to a loopback
	// Host).
	Token func() string
	// OffLoopback: the listener is not loopback, or gateway.http.behindProxy.
	OffLoopback bool
	// BehindProxy: gateway.http.behindProxy (the login cookie is Secure:
	// channels.SecureCookie).
	BehindProxy bool
	Store       Store
	Live        Live
	Log         *zap.Logger
	Now         func() time.Time // nil = time.Now
}

// Console serves /admin, /admin/login and /admin/api/.
type Console struct {
	opts  Options
	log   *zap.Logger
	cross *http.CrossOriginProtection

	mu      sync.Mutex
	streams int // open event streams

	poll         time.Duration // how often a stream looks for other replicas' changes
	snapshots    shared[map[string]any]
	fingerprints shared[string]

	end     chan struct{} // closed by EndStreams
	endOnce sync.Once
}

// EndStreams ends every open event stream (the server is shutting down:
// http.Server.Shutdown does not wait for them to end by themselves).
func (c *Console) EndStreams() { c.endOnce.Do(func() { close(c.end) }) }

// New returns the console.
func New(o Options) *Console {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return &Console{opts: o, log: o.Log.Named("admin"), cross: http.NewCrossOriginProtection(), end: make(chan struct{}), poll: poll}
}

// CookieName is the login cookie: an HMAC of the token, never the token.
const CookieName = "herald_admin"

// maxStreams bounds the open event streams.
const maxStreams = 32

// Routes are the console's patterns for the gateway's mux.
func (c *Console) Routes() map[string]http.Handler {
	api := func(h func(w http.ResponseWriter, r *http.Request, actor string)) http.Handler {
		return c.cross.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			actor, ok := c.authorize(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald-admin"`)
				writeError(w, http.StatusUnauthorized, "unauthorized")
				return
			}
			w.Header().Set("Cache-Control", "no-store")
			h(w, r, actor)
		}))
	}
	return map[string]http.Handler{
		"GET /admin":                              http.HandlerFunc(c.page),
		"GET /admin/{$}":                          http.HandlerFunc(c.page),
		"POST /admin/login":                       c.cross.Handler(http.HandlerFunc(c.login)),
		"POST /admin/logout":                      c.cross.Handler(http.HandlerFunc(c.logout)),
		"GET /admin/api/overview":                 api(c.overview),
		"GET /admin/api/conversations":            api(c.conversations),
		"GET /admin/api/conversations/{key}":      api(c.transcript),
		"GET /admin/api/runs":                     api(c.runs),
		"POST /admin/api/runs/{id}/stop":          api(c.stopRun),
		"POST /admin/api/runs/{id}/send":          api(c.sendRun),
		"GET /admin/api/outbox":                   api(c.outbox),
		"POST /admin/api/outbox/{id}/{action}":    api(c.outboxAction),
		"GET /admin/api/intake":                   api(c.intake),
		"GET /admin/api/schedules":                api(c.schedules),
		"POST /admin/api/schedules/{id}/{action}": api(c.scheduleAction),
		"GET /admin/api/spend":                    api(c.spend),
		"GET /admin/api/approvals":                api(c.approvals),
		"GET /admin/api/events":                   api(c.events),
		// Anything else under the API is a JSON 404 naming the request
		// (after the token check: no probing for paths), not Go's text one.
		"/admin/api/": api(func(w http.ResponseWriter, r *http.Request, _ string) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no console API %s %s (docs/operations.md lists them)", r.Method, r.URL.Path))
		}),
	}
}

// authorize reports whether r may use the console, and as whom: "token"
// (Authorization: Bearer), "cookie" (the login cookie) or "loopback" (no
// token configured; a loopback request to a loopback Host, not proxied).
// A token is never taken from the URL.
func (c *Console) authorize(r *http.Request) (string, bool) {
	token := c.token()
	if token == "" {
		if c.opts.OffLoopback || channels.Forwarded(r) || !channels.LoopbackHost(r.Host) {
			return "", false
		}
		return "loopback", true
	}
	if got, sent := channels.BearerToken(r); sent {
		if channels.SecretEqual(got, token) {
			return "token", true
		}
		return "", false
	}
	if ck, err := r.Cookie(CookieName); err == nil && channels.SecretEqual(ck.Value, cookieValue(token)) {
		return "cookie", true
	}
	return "", false
}

// token is the configured token, trimmed.
func (c *Console) token() string {
	if c.opts.Token == nil {
		return ""
	}
	return strings.TrimSpace(c.opts.Token())
}

// cookieValue is the login cookie for token: a changed token ends every
// cookie.
func cookieValue(token string) string { return channels.TokenCookie(token, "herald admin cookie v1") }

// login serves POST /admin/login: the form field token, when right, gets
// the login cookie (HttpOnly, SameSite=Strict, Secure as the web chat's:
// channels.SecureCookie). 401 with no detail otherwise.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	tok, token := strings.TrimSpace(r.PostFormValue("token")), c.token()
	if token == "" {
		if _, ok := c.authorize(r); ok {
			writeJSON(w, http.StatusOK, map[string]bool{"token": false})
			return
		}
		writeError(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	if !channels.SecretEqual(tok, token) {
		c.log.Warn("console login refused", zap.String("remoteAddr", r.RemoteAddr))
		writeError(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: cookieValue(token), Path: "/admin", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: channels.SecureCookie(r, c.opts.BehindProxy), MaxAge: 7 * 24 * 3600})
	c.log.Info("console login", zap.String("actor", "token"), zap.String("remoteAddr", r.RemoteAddr))
	writeJSON(w, http.StatusOK, map[string]bool{"token": true})
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/admin", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: channels.SecureCookie(r, c.opts.BehindProxy), MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

// acted logs an operator's action with who did it (SPEC §27).
func (c *Console) acted(r *http.Request, actor, action, target string, err error, fields ...zap.Field) {
	fields = append([]zap.Field{zap.String("action", action), zap.String("target", target), zap.String("actor", actor),
		zap.String("remoteAddr", r.RemoteAddr)}, fields...)
	if err != nil {
		c.log.Warn("console action failed", append(fields, zap.Error(err))...)
		return
	}
	c.log.Info("console action", fields...)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
