package web

import "errors"

var (
	// ErrInvalidClient says a client id is not 1–64 characters of [A-Za-z0-9_-].
	ErrInvalidClient = errors.New("client must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-'")
	// ErrNotRunning says the adapter was not started, or was stopped.
	ErrNotRunning = errors.New("web chat is not running")
	// ErrNoLog says Options.Log was nil.
	ErrNoLog = errors.New("web: Options.Log is required")
)
