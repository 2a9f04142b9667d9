package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// Names of what the page and scripts present (SPEC §17).
const (
	// ClientSecretHeader carries a client's secret.
	ClientSecretHeader = "X-Herald-Client-Secret"
	// TokenCookie is the page's cookie standing for the web token: an
	// HMAC of the token, never the token itself.
	TokenCookie = "herald_token"
	// clientCookiePrefix + client id names the cookie holding that
	// client's secret.
	clientCookiePrefix = "herald_client_"
)

// Stream caps (SPEC §17).
const (
	DefaultMaxStreams    = 64 // open event streams at once
	MaxStreamsPerClient  = 8  // open event streams of one client
	clientSecretRawBytes = 32
)

// Guard is the web API's access check: without a token, only requests whose
// Host names loopback (no DNS rebinding); with one, requests that carry it
// in "Authorization: Bearer <token>" or the page's cookie — and, only while
// the listener is loopback, in ?token= as before. The gateway's /mcp,
// /readyz details and /metrics use the same check.
type Guard struct {
	Token       string
	OffLoopback bool // the listener is not loopback (then Token is set)
}

// offLoopback reports whether the off-loopback rules apply to r: the
// listener is not loopback, or r came through a proxy.
func (g Guard) offLoopback(r *http.Request) bool { return g.OffLoopback || channels.Forwarded(r) }

// proxiedWithoutToken is the refusal of a proxied request when no web
// token is set.
const proxiedWithoutToken = "this request came through a proxy (Forwarded or X-Forwarded-For header), and the web chat has no token: " +
	"behind a reverse proxy set channels.web.token and gateway.http.behindProxy: true"

// Check reports whether r passes: 0 and "" when it does, else the status
// and what to do.
func (g Guard) Check(r *http.Request) (int, string) {
	if g.Token == "" {
		if channels.Forwarded(r) {
			return http.StatusForbidden, proxiedWithoutToken
		}
		if !channels.LoopbackHost(r.Host) {
			return http.StatusForbidden, "this web chat has no token and answers only on localhost; use http://127.0.0.1:<port>/ or set channels.web.token"
		}
		return 0, ""
	}
	if g.tokenOK(r) {
		return 0, ""
	}
	if g.offLoopback(r) {
		return http.StatusUnauthorized, "missing or wrong token: send \"Authorization: Bearer <token>\" (the chat page asks for it and keeps it in a cookie); a token in the URL is not accepted"
	}
	return http.StatusUnauthorized, "missing or wrong token: send \"Authorization: Bearer <token>\" or add ?token=<token>"
}

// Allows reports whether r passes Check.
func (g Guard) Allows(r *http.Request) bool {
	status, _ := g.Check(r)
	return status == 0
}

// Wrap answers requests that fail Check with their status and a JSON error.
func (g Guard) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, msg := g.Check(r); status != 0 {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			}
			writeError(w, status, msg)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (g Guard) tokenOK(r *http.Request) bool {
	if got, _ := channels.BearerToken(r); got != "" {
		return equal(got, g.Token)
	}
	if c, err := r.Cookie(TokenCookie); err == nil && c.Value != "" {
		return equal(c.Value, tokenCookieValue(g.Token))
	}
	if !g.offLoopback(r) {
		if got := strings.TrimSpace(r.URL.Query().Get("token")); got != "" {
			return equal(got, g.Token)
		}
	}
	return false
}

var equal = channels.SecretEqual

// tokenCookieValue is the value of the page's token cookie
// (channels.TokenCookie).
func tokenCookieValue(token string) string {
	return channels.TokenCookie(token, "herald web token cookie v1")
}

// setCookie sets an HttpOnly SameSite=Strict cookie for the whole site,
// Secure by the rule the console's cookie follows too
// (channels.SecureCookie).
func (a *Adapter) setCookie(w http.ResponseWriter, r *http.Request, name, value string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: channels.SecureCookie(r, a.opts.BehindProxy), MaxAge: 400 * 24 * 3600})
}

// handleLogin serves POST /api/login: a request that passed the guard with
// the token in its Authorization header gets the page's token cookie, so
// the page never puts the token in a URL (EventSource cannot send headers).
func (a *Adapter) handleLogin(w http.ResponseWriter, r *http.Request) {
	if a.opts.Token == "" {
		writeJSON(w, http.StatusOK, map[string]bool{"token": false})
		return
	}
	a.setCookie(w, r, TokenCookie, tokenCookieValue(a.opts.Token))
	writeJSON(w, http.StatusOK, map[string]bool{"token": true})
}

// ClientSecrets keeps the hash of each web client's secret (SPEC §17).
type ClientSecrets interface {
	// ClaimSecret stores hash as client's secret hash unless the client has
	// one; it reports whether it stored it.
	ClaimSecret(ctx context.Context, client, hash string) (bool, error)
	// SecretHash returns client's secret hash; found is false when it has none.
	SecretHash(ctx context.Context, client string) (hash string, found bool, err error)
}

// memorySecrets is the ClientSecrets of an adapter given none (tests).
type memorySecrets struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *memorySecrets) ClaimSecret(_ context.Context, client, hash string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[client]; ok {
		return false, nil
	}
	s.m[client] = hash
	return true, nil
}

func (s *memorySecrets) SecretHash(_ context.Context, client string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.m[client]
	return h, ok, nil
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func newClientSecret() string {
	b := make([]byte, clientSecretRawBytes)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ownership is what a request may do with a client's conversation.
type ownership int

const (
	unclaimed ownership = iota // the client has no secret yet
	owner                      // the request carries the client's secret
	stranger                   // the client has a secret; the request does not carry it
	wrong                      // the request carries a secret that is not the client's
)

// presentedSecret is the client secret the request carries: the header,
// else the page's cookie for that client.
func presentedSecret(r *http.Request, client string) string {
	if s := strings.TrimSpace(r.Header.Get(ClientSecretHeader)); s != "" {
		return s
	}
	if c, err := r.Cookie(clientCookiePrefix + client); err == nil {
		return c.Value
	}
	return ""
}

// ownershipOf tells whether r owns client's conversation.
func (a *Adapter) ownershipOf(r *http.Request, client string) (ownership, error) {
	hash, found, err := a.secrets.SecretHash(r.Context(), client)
	if err != nil {
		return stranger, err
	}
	got := presentedSecret(r, client)
	switch {
	case !found:
		return unclaimed, nil
	case got == "":
		return stranger, nil
	case equal(hashSecret(got), hash):
		return owner, nil
	}
	return wrong, nil
}

// ownershipFor is ownershipOf for a GET handler: when the client's secret
// cannot be read it logs, answers 500 with failed and reports false.
func (a *Adapter) ownershipFor(w http.ResponseWriter, r *http.Request, client, failed string) (ownership, bool) {
	o, err := a.ownershipOf(r, client)
	if err != nil {
		a.log.Error("web client secret not read", zap.String("client", client), zap.Error(err))
		writeError(w, http.StatusInternalServerError, failed)
		return o, false
	}
	return o, true
}

// offLoopback reports whether the off-loopback rules apply to r (SPEC
// §17): the listener is not loopback, or r came through a proxy.
func (a *Adapter) offLoopback(r *http.Request) bool {
	return a.opts.OffLoopback || channels.Forwarded(r)
}

// refuseClient answers a request for client that does not carry its
// secret where one is needed: off loopback any; on loopback only a wrong
// one. It reports whether it answered.
func (a *Adapter) refuseClient(w http.ResponseWriter, r *http.Request, o ownership, client string) bool {
	switch {
	case o == wrong, o == stranger && a.offLoopback(r):
		writeError(w, http.StatusForbidden, "client "+client+" belongs to another browser: send its clientSecret (header "+ClientSecretHeader+
			" or the page's cookie), or use a new client id")
		return true
	}
	return false
}

// streamSlots counts open event streams, at most max in all and
// MaxStreamsPerClient per client.
type streamSlots struct {
	mu       sync.Mutex
	max      int
	total    int
	byClient map[string]int
}

// take reserves a stream slot for client; "" when it did, else why not.
func (s *streamSlots) take(client string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.max:
		return "too many event streams are open (channels.web.maxStreams); try again later"
	case s.byClient[client] >= MaxStreamsPerClient:
		return "this client has 8 event streams open already; close one (another tab) first"
	}
	s.total++
	s.byClient[client]++
	return ""
}

func (s *streamSlots) release(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.byClient[client]--; s.byClient[client] <= 0 {
		delete(s.byClient, client)
	}
}

// remoteIP is the address part of r.RemoteAddr.
func remoteIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
