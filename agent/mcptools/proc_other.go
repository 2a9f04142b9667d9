//go:build unix && !linux

package mcptools

import "syscall"

// setPdeathsig has no equivalent here: a server outlives a gateway killed by
// SIGKILL until it reads EOF on stdin (well-behaved servers exit then).
func setPdeathsig(*syscall.SysProcAttr) {}
