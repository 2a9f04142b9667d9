// Package loopback gives tests an address for a server they start (and
// may stop and start again): a loopback address with a port that was free
// a moment ago. It must not be imported outside tests and dev tools.
//
// Where the system has all of 127.0.0.0/8 (Linux routes it to lo) the
// address is one of its own, a random 127.a.b.c, not 127.0.0.1. Between
// picking a port and binding it (a server still starting: initdb,
// Dendrite's start-up) or while a server is down (a killed gateway, a
// stopped PostgreSQL), a port of 127.0.0.1 is free to any other process:
// another test's listener or an outgoing connection takes it, and the
// server fails with "bind: address already in use". Nothing else binds a
// port of a 127.a.b.c of its own (a connection to it comes from 127.0.0.1),
// so the port stays the server's. Elsewhere (macOS has only 127.0.0.1) it
// is a port of 127.0.0.1.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
)

// Addr returns host:port, a free port of a loopback address of its own.
func Addr() (string, error) {
	a, err := free()
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

// HostPort is Addr split into its host and port.
func HostPort() (string, int, error) {
	a, err := free()
	if err != nil {
		return "", 0, err
	}
	return a.IP.String(), a.Port, nil
}

// free returns a free port of a loopback address of its own.
func free() (*net.TCPAddr, error) {
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr), nil
}
