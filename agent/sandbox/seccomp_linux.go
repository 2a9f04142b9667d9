package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// landlockUnixABI is the Landlock ABI (9) that restricts connect(2) and
// sendmsg(2) to pathname Unix sockets (LANDLOCK_ACCESS_FS_RESOLVE_UNIX).
// Abstract ones are scoped since ABI 6 (minLandlockABI). Below it a
// Landlock domain does not stop a command from reaching any socket file
// whose path it knows (the systemd user bus, docker.sock, PostgreSQL's).
const landlockUnixABI = 9

// Where a socket(2) refused by the filter fails, and how. EACCES is the
// error socket(2) documents for "not permitted to create a socket of this
// type"; programs report it plainly ("Permission denied"). io_uring is
// refused with ENOSYS, the answer of a kernel without it, so that programs
// fall back to plain system calls.
const (
	refuseSocket  = seccomp.ActionErrno | seccomp.Action(unix.EACCES)
	refuseIOURing = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)
)

// seccompPolicy is the socket filter of a Landlock sandbox, for the
// native architecture (the caller adds the architecture check):
//
//   - without network, socket(2) is refused for every address family
//     (Landlock's network rules cover only TCP before ABI 10, and a network
//     namespace of its own needs CAP_SYS_ADMIN); socketpair(2) stays, so
//     processes can still talk to each other through connected pairs;
//   - with network, socket(AF_UNIX) is refused unless Landlock restricts
//     pathname Unix sockets itself (unixScoped: ABI 9 or later);
//   - io_uring is refused in both: IORING_OP_SOCKET would create a socket
//     without socket(2).
//
// The address family is compared on its low 32 bits only, as the kernel
// reads it (an int): a caller cannot slip AF_UNIX past the filter with
// high bits set.
func seccompPolicy(network, unixScoped bool) seccomp.Policy {
	p := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}, Action: refuseIOURing},
		},
	}
	switch {
	case !network:
		p.Syscalls = append(p.Syscalls, seccomp.SyscallGroup{Names: []string{"socket"}, Action: refuseSocket})
	case !unixScoped:
		// Low 32 bits == AF_UNIX (1): no bit but bit 0 set, and bit 0 set.
		p.Syscalls = append(p.Syscalls, seccomp.SyscallGroup{
			NamesWithCondtions: []seccomp.NameWithConditions{{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.BitsNotSet, Value: 0xffffffff &^ unix.AF_UNIX},
				{Argument: 0, Operation: seccomp.BitsSet, Value: unix.AF_UNIX},
			}}},
			Action: refuseSocket,
		})
	}
	return p
}

// seccompProgram is the whole filter: system calls of another
// architecture than the helper's own (i386 through int 0x80 on x86_64,
// AArch32 on arm64: their socket numbers, and i386's socketcall, would go
// unchecked) kill the process; native ones go through seccompPolicy (which
// also refuses x32 system calls on x86_64).
func seccompProgram(network, unixScoped bool) ([]bpf.Instruction, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("no socket filter for %s (Herald's Landlock sandbox supports amd64 and arm64)", runtime.GOARCH)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	p := seccompPolicy(network, unixScoped)
	body, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	const archOffset = 4 // seccomp_data.arch
	return append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}, body...), nil
}

// installSeccomp applies the socket filter to the calling thread, which
// then execs the command (the filter is inherited across execve and
// fork). It needs no_new_privs (set by the Landlock step). prctl is used
// rather than seccomp(2): the shipped systemd unit's SystemCallFilter
// allows prctl.
func installSeccomp(network bool, landlockABI int) error {
	insts, err := seccompProgram(network, landlockABI >= landlockUnixABI)
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	err = unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0)
	runtime.KeepAlive(&prog)
	runtime.KeepAlive(filter)
	return err
}
