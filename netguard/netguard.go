// Package netguard keeps agent tools off addresses they must not reach:
// loopback, private (RFC 1918, RFC 4193), link-local (cloud metadata at
// 169.254.169.254 included), CGNAT, unspecified, multicast and broadcast
// addresses. The check runs on the address actually dialled, after DNS
// resolution, so a hostname that resolves to loopback, a DNS answer that
// changes between two lookups, or a redirect to an internal host cannot get
// around it. An operator may allow specific hosts or CIDRs
// (tools.webFetch.allowPrivate).
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// blocked lists the ranges refused by default, each with the word used in
// the refusal.
var blocked = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "private (RFC 4193)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6 (deprecated)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
}

// embedding are IPv6 ranges that carry an IPv4 address the host may reach
// through a translator or tunnel: the IPv4 address inside is checked like
// one dialled directly (issue 35).
var embedding = []struct {
	prefix netip.Prefix
	at     int // byte offset of the IPv4 address
	kind   string
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12, "NAT64"},
	{netip.MustParsePrefix("2002::/16"), 2, "6to4"},
}

// Refused is the error of a connection the policy did not allow.
type Refused struct {
	Host string     // the host name or address asked for
	Addr netip.Addr // the address it resolved to
	Kind string     // e.g. "loopback", "private (RFC 1918)"
}

func (e *Refused) Error() string {
	if e.Host != "" && e.Host != e.Addr.String() {
		return fmt.Sprintf("%s resolves to %s, a %s address", e.Host, e.Addr, e.Kind)
	}
	return fmt.Sprintf("%s is a %s address", e.Addr, e.Kind)
}

// Policy decides which addresses may be dialled. The zero value refuses
// every blocked range and allows everything else.
type Policy struct {
	nets  []netip.Prefix
	hosts map[string]bool
}

// ErrBadEntry wraps a malformed allow entry.
var ErrBadEntry = errors.New("not a CIDR, IP address or host name")

// NewPolicy builds a policy that also allows the given entries: CIDRs
// ("10.1.2.0/24"), single addresses ("10.0.0.5", "::1") or host names
// ("intranet.example", matched case-insensitively, exactly — subdomains
// are not included).
func NewPolicy(allow []string) (*Policy, error) {
	p := &Policy{hosts: map[string]bool{}}
	for i, raw := range allow {
		e := strings.TrimSpace(raw)
		if pr, err := netip.ParsePrefix(e); err == nil {
			p.nets = append(p.nets, pr.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			p.nets = append(p.nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		if !validHostname(e) {
			return nil, fmt.Errorf("entry %d %q: %w", i, raw, ErrBadEntry)
		}
		p.hosts[strings.ToLower(strings.TrimSuffix(e, "."))] = true
	}
	return p, nil
}

// CheckEntry reports whether s is a valid allow entry (for config validation).
func CheckEntry(s string) error {
	_, err := NewPolicy([]string{s})
	return err
}

func validHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// hostAllowed reports whether host was allowed by name.
func (p *Policy) hostAllowed(host string) bool {
	return p != nil && p.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// Check returns a *Refused error when addr (dialled for host) is in a
// blocked range and not allowed.
func (p *Policy) Check(host string, addr netip.Addr) error {
	addr = addr.Unmap()
	if p.hostAllowed(host) {
		return nil
	}
	if p != nil {
		for _, n := range p.nets {
			if n.Contains(addr) {
				return nil
			}
		}
	}
	for _, e := range embedding {
		if e.prefix.Contains(addr) {
			b := addr.As16()
			inner := netip.AddrFrom4([4]byte(b[e.at : e.at+4]))
			if err := p.Check("", inner); err != nil {
				r, _ := AsRefused(err)
				return &Refused{Host: host, Addr: addr, Kind: r.Kind + " (" + inner.String() + " through " + e.kind + ")"}
			}
		}
	}
	if addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return &Refused{Host: host, Addr: addr, Kind: "broadcast"}
	}
	for _, b := range blocked {
		if b.prefix.Contains(addr) {
			return &Refused{Host: host, Addr: addr, Kind: b.kind}
		}
	}
	return nil
}

// DialContext dials like d, refusing addresses the policy blocks. The
// check runs in the dialer's Control hook, on the address about to be
// connected to, for every address a name resolves to.
func (p *Policy) DialContext(d *net.Dialer) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		dd := *d
		dd.ControlContext = func(ctx context.Context, network, resolved string, c syscall.RawConn) error {
			h, _, err := net.SplitHostPort(resolved)
			if err != nil {
				return err
			}
			a, err := netip.ParseAddr(h)
			if err != nil {
				return fmt.Errorf("netguard: cannot parse dialled address %q: %w", resolved, err)
			}
			if err := p.Check(host, a); err != nil {
				return err
			}
			if d.ControlContext != nil {
				return d.ControlContext(ctx, network, resolved, c)
			}
			return nil
		}
		return dd.DialContext(ctx, network, address)
	}
}

// MaxRedirects is how many redirects a guarded client follows.
const MaxRedirects = 5

// Client returns an HTTP client for agent tools: its connections go
// through the policy, it uses no proxy from the environment (a proxy
// would dial the internal address on the agent's behalf), and it follows
// at most MaxRedirects redirects, each to an address the policy allows.
func (p *Policy) Client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           p.DialContext(d),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		IdleConnTimeout:       60 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= MaxRedirects {
				return fmt.Errorf("stopped after %d redirects", MaxRedirects)
			}
			return nil
		},
	}
}

// AsRefused finds a *Refused in err's chain.
func AsRefused(err error) (*Refused, bool) {
	var r *Refused
	ok := errors.As(err, &r)
	return r, ok
}
