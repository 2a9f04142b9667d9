package gateway

import "golang.org/x/sys/unix"

// hardenProcess makes the gateway not dumpable: /proc/<pid>/environ, mem and
// the like become root's, and no process of the same user without
// CAP_SYS_PTRACE may read them or attach a debugger (SPEC §17). Programs the
// gateway starts are dumpable again after their execve.
func hardenProcess() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
