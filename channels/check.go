package channels

import (
	"context"
	"errors"
	"net"
	"net/url"
)

// Check is one line of `herald doctor`: what was checked, how it went, and
// what to do about it.
type Check struct {
	Name   string // e.g. "slack auth.test"
	Status string // CheckOK, CheckWarn or CheckFail
	Detail string // what was found
	Fix    string // what to change; empty when nothing needs doing
}

// Check outcomes.
const (
	CheckOK   = "ok"
	CheckWarn = "warn"
	CheckFail = "FAIL"
)

// Checker is a channel that can check its settings against the platform's
// real endpoint without starting (no sink, no receive loop).
type Checker interface {
	Check(ctx context.Context) []Check
}

// Unreachable reports whether err is a failure to reach the endpoint at
// all (DNS, connection refused, timeout) rather than an answer from it.
func Unreachable(err error) bool {
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne)
}
