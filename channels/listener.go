package channels

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
)

// The HTTP listener's off-loopback rules (SPEC §17) that the web chat and
// the operator's console (SPEC §27), peers on the listener, both apply.

// Forwarded reports whether r came through a proxy: it carries a
// Forwarded, X-Forwarded-For, X-Forwarded-Host or X-Real-IP header. Such a
// request is treated as off loopback whatever the listener is (a local
// reverse proxy connects from 127.0.0.1 for everyone). Only the strict side
// trusts the header: sending one never loosens a check, leaving it out is
// the plain listener's rule.
func Forwarded(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip"} {
		if len(r.Header.Values(h)) > 0 {
			return true
		}
	}
	return false
}

// LoopbackHost reports whether a Host header names this machine's
// loopback: localhost (and *.localhost), 127.0.0.0/8 or ::1 (no DNS
// rebinding onto a listener without a token).
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// BearerToken is the token of r's "Authorization: Bearer <token>" header;
// sent is false without an Authorization header, and the token "" with
// one of another scheme.
func BearerToken(r *http.Request) (token string, sent bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, rest, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(rest), true
}

// SecretEqual compares a presented secret with the configured one in
// constant time; an empty presented one never matches.
func SecretEqual(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// TokenCookie is the value of a login cookie standing for token: an HMAC
// of the token keyed by it over label (one label per cookie), so the
// cookie is not the token and a changed token ends every cookie.
func TokenCookie(token, label string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte(label))
	return hex.EncodeToString(mac.Sum(nil))
}

// SecureCookie reports whether a cookie set in answer to r is Secure: r
// came over TLS, a reverse proxy forwards to the listener
// (gateway.http.behindProxy: TLS ends at the proxy), or r came through a
// proxy that says the client used https (X-Forwarded-Proto or Forwarded
// proto=https). A plain-http listener off loopback without a proxy gets no
// Secure cookie: the browser would not send it back over http.
func SecureCookie(r *http.Request, behindProxy bool) bool {
	return r.TLS != nil || behindProxy || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https") ||
		strings.Contains(strings.ToLower(r.Header.Get("Forwarded")), "proto=https")
}
