package channels

import (
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
