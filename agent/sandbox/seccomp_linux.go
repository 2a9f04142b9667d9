package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// landlockUnixABI is the Landlock ABI (9) that restricts connect(2) and
// sendmsg(2) to pathname Unix sockets (LANDLOCK_ACCESS_FS_RESOLVE_UNIX).
// Abstract ones are scoped since ABI 6 (minLandlockABI). Below it a
// Landlock domain does not stop a command from reaching any socket file
// whose path it knows (the systemd user bus, docker.sock, PostgreSQL's).
const landlockUnixABI = 9

// What the filter answers. A socket(2) it refuses fails with EACCES, the
// error socket(2) documents for "not permitted to create a socket of this
// type"; programs report it plainly ("Permission denied"). io_uring (and
// an x32 system call) is refused with ENOSYS, the answer of a kernel
// without it, so that programs fall back to plain system calls.
const (
	retAllow         = unix.SECCOMP_RET_ALLOW
	retRefuseSocket  = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
	retRefuseIOURing = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill          = unix.SECCOMP_RET_KILL_PROCESS
)

// Offsets in struct seccomp_data: nr, arch, instruction_pointer, args[6]
// (amd64 and arm64 are little-endian: an argument's low 32 bits come
// first).
const (
	offNr         = 0
	offArch       = 4
	offArg0Low    = 16
	x32SyscallBit = 0x40000000 // __X32_SYSCALL_BIT
)

// seccompProgram is the socket filter of a Landlock sandbox. System calls
// of another architecture than the helper's own (i386 through int 0x80 on
// x86_64, AArch32 on arm64: their socket numbers, and i386's socketcall,
// would go unchecked) kill the process; on x86_64, x32 system calls are
// refused. Then, for the native architecture:
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
// high bits set. The program is written out here (rather than assembled
// from a policy by a seccomp library, whose syscall tables for every
// architecture were built at every process's start: 0.15 ms and 165 KB of
// package init for a filter of five system calls).
func seccompProgram(network, unixScoped bool) ([]bpf.Instruction, error) {
	var native uint32
	switch runtime.GOARCH {
	case "amd64":
		native = unix.AUDIT_ARCH_X86_64
	case "arm64":
		native = unix.AUDIT_ARCH_AARCH64
	default:
		return nil, fmt.Errorf("no socket filter for %s (Herald's Landlock sandbox supports amd64 and arm64)", runtime.GOARCH)
	}
	// Each check is "if the accumulator is v, return ret": when it is not,
	// the jump skips the return.
	is := func(v, ret uint32) []bpf.Instruction {
		return []bpf.Instruction{bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipFalse: 1}, bpf.RetConstant{Val: ret}}
	}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: native, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if native == unix.AUDIT_ARCH_X86_64 {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: retRefuseIOURing})
	}
	p = append(p, is(unix.SYS_IO_URING_SETUP, retRefuseIOURing)...)
	p = append(p, is(unix.SYS_IO_URING_ENTER, retRefuseIOURing)...)
	p = append(p, is(unix.SYS_IO_URING_REGISTER, retRefuseIOURing)...)
	switch {
	case !network:
		p = append(p, is(unix.SYS_SOCKET, retRefuseSocket)...)
	case !unixScoped:
		// socket: load the family's low 32 bits (the accumulator no longer
		// holds the number: this check comes last) and refuse AF_UNIX.
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKET, SkipFalse: 3},
			bpf.LoadAbsolute{Off: offArg0Low, Size: 4})
		p = append(p, is(unix.AF_UNIX, retRefuseSocket)...)
	}
	return append(p, bpf.RetConstant{Val: retAllow}), nil
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
