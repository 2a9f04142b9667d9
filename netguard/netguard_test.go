package netguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCheckRefusesInternalRanges(t *testing.T) {
	strict, _ := NewPolicy(nil)
	refused := map[string]string{
		"127.0.0.1":        "loopback",
		"127.0.0.2":        "loopback",
		"::1":              "loopback",
		"::ffff:127.0.0.1": "loopback", // IPv4-mapped IPv6
		"10.1.2.3":         "private (RFC 1918)",
		"172.31.255.1":     "private (RFC 1918)",
		"192.168.1.1":      "private (RFC 1918)",
		"fd12:3456::1":     "private (RFC 4193)",
		"169.254.169.254":  "link-local",
		"fe80::1":          "link-local",
		"100.64.0.1":       "carrier-grade NAT",
		"0.0.0.0":          "unspecified",
		"::":               "unspecified",
		"224.0.0.1":        "multicast",
		"255.255.255.255":  "broadcast",
		// IPv6 that reaches an IPv4 address (issue 35).
		"64:ff9b::7f00:1":    "loopback (127.0.0.1 through NAT64)",
		"64:ff9b::a9fe:a9fe": "link-local (169.254.169.254 through NAT64)",
		"2002:a00:1::1":      "private (RFC 1918) (10.0.0.1 through 6to4)",
		"::7f00:1":           "IPv4-compatible IPv6 (deprecated)",
		"64:ff9b:1::a00:1":   "local-use NAT64",
	}
	for a, kind := range refused {
		err := strict.Check("", netip.MustParseAddr(a))
		r, ok := AsRefused(err)
		if !ok || r.Kind != kind {
			t.Errorf("Check(%s) = %v, want refused as %s", a, err, kind)
		}
	}
	for _, a := range []string{"93.184.215.14", "1.1.1.1", "2606:4700::1111", "172.32.0.1", "100.128.0.1", "64:ff9b::101:101", "2002:101:101::1"} {
		if err := strict.Check("", netip.MustParseAddr(a)); err != nil {
			t.Errorf("Check(%s) = %v, want allowed (public)", a, err)
		}
	}
}

func TestAllowEntries(t *testing.T) {
	p, err := NewPolicy([]string{"10.1.2.0/24", " 127.0.0.5 ", "Intranet.Example", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, addr string
		ok         bool
	}{
		{"", "10.1.2.200", true},
		{"", "10.1.3.1", false},
		{"", "127.0.0.5", true},
		{"", "127.0.0.6", false},
		{"intranet.example", "10.9.9.9", true},
		{"INTRANET.example.", "192.168.0.1", true},
		{"sub.intranet.example", "192.168.0.1", false},
		{"", "fd00::5", true},
	} {
		err := p.Check(c.host, netip.MustParseAddr(c.addr))
		if (err == nil) != c.ok {
			t.Errorf("Check(%q, %s) = %v, want allowed=%v", c.host, c.addr, err, c.ok)
		}
	}
	for _, bad := range []string{"10.1.2.0/33", "", "exa mple.com", "-x.example", "http://intranet.example"} {
		if _, err := NewPolicy([]string{bad}); !errors.Is(err, ErrBadEntry) {
			t.Errorf("NewPolicy(%q) = %v, want ErrBadEntry", bad, err)
		}
	}
}

// The check runs at dial time on the resolved address: a name that
// resolves to loopback is refused before any connection is made.
func TestDialRefusesResolvedLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := NewPolicy(nil)
	dial := p.DialContext(&net.Dialer{Timeout: 5 * time.Second})
	_, err = dial(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	r, ok := AsRefused(err)
	if !ok || !strings.Contains(err.Error(), "localhost resolves to 127.0.0.1, a loopback address") {
		t.Fatalf("dial localhost: %v (%+v), want a refusal naming the resolved address", err, r)
	}
	select {
	case <-accepted:
		t.Fatal("the listener accepted a connection the policy refused")
	default:
	}
	allowed, _ := NewPolicy([]string{"localhost"})
	c, err := allowed.DialContext(&net.Dialer{Timeout: 5 * time.Second})(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("dial an allowed host: %v", err)
	}
	c.Close()
}
