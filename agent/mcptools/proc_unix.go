//go:build unix

package mcptools

import (
	"os/exec"
	"syscall"
)

// startAlone makes a stdio server the leader of its own process group, so
// stopping it also stops whatever it started, and (on Linux) has the kernel
// kill it when the gateway dies, even by SIGKILL.
func startAlone(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(cmd.SysProcAttr)
}

// killGroup sends SIGKILL to the server's whole process group.
func killGroup(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
