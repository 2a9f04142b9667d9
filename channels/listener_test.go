package channels

import (
	"crypto/tls"
	"net/http/httptest"
	"testing"
)

// TestSecureCookie: the one rule the web chat's and the console's cookies
// follow.
func TestSecureCookie(t *testing.T) {
	for _, c := range []struct {
		name        string
		tls         bool
		behindProxy bool
		header      [2]string
		want        bool
	}{
		{"plain http", false, false, [2]string{}, false},
		{"plain http through a proxy that says http", false, false, [2]string{"X-Forwarded-Proto", "http"}, false},
		{"TLS", true, false, [2]string{}, true},
		{"behindProxy", false, true, [2]string{}, true},
		{"X-Forwarded-Proto", false, false, [2]string{"X-Forwarded-Proto", "HTTPS"}, true},
		{"Forwarded", false, false, [2]string{"Forwarded", "for=192.0.2.1;Proto=https"}, true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if c.header[0] != "" {
			r.Header.Set(c.header[0], c.header[1])
		}
		if got := SecureCookie(r, c.behindProxy); got != c.want {
			t.Errorf("%s: SecureCookie = %v, want %v", c.name, got, c.want)
		}
	}
}
