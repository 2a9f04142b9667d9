//go:build !linux

package gateway

// hardenProcess has no equivalent outside Linux.
func hardenProcess() error { return nil }
