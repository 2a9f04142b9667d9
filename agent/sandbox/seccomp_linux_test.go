package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The test binary doubles as the client a confined command runs to try
// each kind of socket: `<test binary> -herald-socket-probe <kind> <target>`
// prints one line, "<kind>: reached <greeting>", "<kind>: sent", "<kind>:
// ok" or "<kind>: refused at <step>: <error>".
const socketProbeArg = "-herald-socket-probe"

func init() {
	if len(os.Args) == 4 && os.Args[1] == socketProbeArg {
		fmt.Println(socketProbe(os.Args[2], os.Args[3]))
		os.Exit(0)
	}
}

func socketProbe(kind, target string) string {
	refused := func(step string, err error) string { return fmt.Sprintf("%s: refused at %s: %v", kind, step, err) }
	reach := func(fd int, sa unix.Sockaddr) string {
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa); err != nil {
			return refused("connect", err)
		}
		b := make([]byte, 64)
		n, _ := unix.Read(fd, b)
		return fmt.Sprintf("%s: reached %s", kind, strings.TrimSpace(string(b[:max(n, 0)])))
	}
	inet := func(addr string) *unix.SockaddrInet4 {
		ap, err := net.ResolveUDPAddr("udp4", addr)
		if err != nil {
			panic(err)
		}
		return &unix.SockaddrInet4{Port: ap.Port, Addr: [4]byte(ap.IP.To4())}
	}
	switch kind {
	case "unix":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return refused("socket", err)
		}
		return reach(fd, &unix.SockaddrUnix{Name: target})
	case "unix-high-bits":
		// AF_UNIX with bits above the int the kernel reads: the same family.
		domain := uint64(1)<<32 | unix.AF_UNIX
		fd, _, errno := unix.Syscall(unix.SYS_SOCKET, uintptr(domain), unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if errno != 0 {
			return refused("socket", errno)
		}
		return reach(int(fd), &unix.SockaddrUnix{Name: target})
	case "tcp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return refused("socket", err)
		}
		return reach(fd, inet(target))
	case "udp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return refused("socket", err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, []byte("UDPREACHED"), 0, inet(target)); err != nil {
			return refused("sendto", err)
		}
		return kind + ": sent"
	case "socketpair":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return refused("socketpair", err)
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		b := make([]byte, 4)
		if _, err := unix.Write(fds[0], []byte("pong")); err != nil {
			return refused("write", err)
		}
		if n, err := unix.Read(fds[1], b); err != nil || string(b[:n]) != "pong" {
			return refused("read", fmt.Errorf("%q, %v", b[:max(n, 0)], err))
		}
		return kind + ": ok"
	}
	return kind + ": unknown probe"
}

// greeter accepts connections on l and greets each with hello, until the
// test ends (it closes l and waits for the loop).
func greeter(t *testing.T, l net.Listener, hello string) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, hello+"\n")
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); wg.Wait() })
}

// datagrams returns what reached pc so far without waiting: on loopback a
// datagram is queued at the receiver before sendto returns, so everything
// a finished command sent is there.
func datagrams(t *testing.T, pc net.PacketConn) []string {
	rc, err := pc.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = rc.Read(func(fd uintptr) bool {
		b := make([]byte, 128)
		for {
			n, _, err := unix.Recvfrom(int(fd), b, unix.MSG_DONTWAIT)
			if err != nil {
				return true
			}
			got = append(got, string(b[:n]))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// nobody is the unprivileged user the tests also run the sandbox as (a
// gateway started by a service manager is not root: no network namespace
// of its own, RLIMIT_NPROC applies).
const nobody = 65534

// sharedDir is a folder every user may enter, removed after the test (a
// t.TempDir's parent is private to the test's user).
func sharedDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "herald-seccomp-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// asUser is how a test runs the Landlock helper: as the test's own user
// (uid < 0), or as uid from a copy of the test binary it can execute.
type asUser struct {
	name string
	uid  int
	exe  string // the binary the helper and the probe run from
}

// id is what `id -u` prints for u.
func (u asUser) id() string {
	if u.uid < 0 {
		return fmt.Sprintf("%d\n", os.Geteuid())
	}
	return fmt.Sprintf("%d\n", u.uid)
}

// users are the users the network tests run the sandbox as: this one, and
// nobody as well when the tests run as root.
func users(t *testing.T) []asUser {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := []asUser{{name: fmt.Sprintf("uid%d", os.Geteuid()), uid: -1, exe: self}}
	if os.Geteuid() != 0 {
		return out
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(sharedDir(t), "sandbox.test")
	if err := os.WriteFile(cp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return append(out, asUser{name: fmt.Sprintf("uid%d", nobody), uid: nobody, exe: cp})
}

// runLandlockAs runs argv confined by Landlock under p as u, in a fresh
// workspace that u owns, and returns its combined output.
func runLandlockAs(t *testing.T, u asUser, p Policy, argv ...string) string {
	t.Helper()
	if !Probe().Landlock.OK {
		t.Skipf("Landlock does not work here: %s", Probe().Landlock.Detail)
	}
	ws := filepath.Join(sharedDir(t), "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	p.Mechanism = Landlock
	c, err := Command(context.Background(), Spec{Policy: p, Dir: ws, ReadOnly: []string{u.exe},
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	if u.uid >= 0 {
		for _, d := range []string{ws, c.tmp} {
			if err := os.Chown(d, u.uid, u.uid); err != nil {
				t.Fatal(err)
			}
		}
		c.Path = u.exe
		c.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.uid)}
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return out.String()
}

// netTargets are a Unix socket outside the workspace, a UDP and a TCP
// listener on 127.0.0.1, each reachable by any user without the sandbox.
type netTargets struct {
	sock         string
	udp          net.PacketConn
	udpAddr, tcp string
}

func listenTargets(t *testing.T) netTargets {
	sock := filepath.Join(sharedDir(t), "s.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	greeter(t, ul, "UNIXREACHED")
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	greeter(t, tl, "TCPREACHED")
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return netTargets{sock: sock, udp: pc, udpAddr: pc.LocalAddr().String(), tcp: tl.Addr().String()}
}

// probeScript runs every socket probe and plain commands (the last prints
// the user id it runs as).
func (nt netTargets) probeScript(exe string) []string {
	return []string{"/bin/sh", "-c", `P="$1"; shift
"$P" ` + socketProbeArg + ` unix "$1"; "$P" ` + socketProbeArg + ` unix-high-bits "$1"
"$P" ` + socketProbeArg + ` udp "$2"; "$P" ` + socketProbeArg + ` tcp "$3"; "$P" ` + socketProbeArg + ` socketpair -
echo hi | tr h H > f && cat f; id -u`, "sh", exe, nt.sock, nt.udpAddr, nt.tcp}
}

// TestLandlockNoNetwork: under Landlock with network off a command cannot
// reach a Unix socket outside its workspace (by path), cannot send a UDP
// datagram or open a TCP connection to 127.0.0.1 — socket() itself is
// refused — as root and as an unprivileged user; socketpair and plain
// commands still work.
func TestLandlockNoNetwork(t *testing.T) {
	for _, u := range users(t) {
		t.Run(u.name, func(t *testing.T) {
			nt := listenTargets(t)
			out := runLandlockAs(t, u, Policy{}, nt.probeScript(u.exe)...)
			for _, want := range []string{
				"unix: refused at socket: permission denied\n",
				"unix-high-bits: refused at socket: permission denied\n",
				"udp: refused at socket: permission denied\n",
				"tcp: refused at socket: permission denied\n",
				"socketpair: ok\n",
				"Hi\n" + u.id(),
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if got := datagrams(t, nt.udp); len(got) > 0 {
				t.Errorf("the UDP listener received %q", got)
			}
		})
	}
}

// TestLandlockNetworkUnixRefused: with network on, TCP and UDP to
// 127.0.0.1 work, while the Unix socket outside the workspace stays out of
// reach (seccomp refuses AF_UNIX sockets below Landlock ABI 9; from ABI 9
// Landlock refuses the connect).
func TestLandlockNetworkUnixRefused(t *testing.T) {
	for _, u := range users(t) {
		t.Run(u.name, func(t *testing.T) {
			nt := listenTargets(t)
			out := runLandlockAs(t, u, Policy{Network: true}, nt.probeScript(u.exe)...)
			for _, want := range []string{"unix: refused at ", "unix-high-bits: refused at ", "udp: sent\n",
				"tcp: reached TCPREACHED\n", "socketpair: ok\n", "Hi\n" + u.id()} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "UNIXREACHED") {
				t.Errorf("the command reached the Unix socket:\n%s", out)
			}
			if got := datagrams(t, nt.udp); len(got) != 1 || got[0] != "UDPREACHED" {
				t.Errorf("the UDP listener received %q, want the one datagram", got)
			}
		})
	}
}

// TestUmask: what a command creates in its workspace is private to the
// gateway's user (0600 files, 0700 folders), under every mechanism, even
// when the gateway's own umask is the usual 022.
func TestUmask(t *testing.T) {
	old := unix.Umask(0o022)
	t.Cleanup(func() { unix.Umask(old) })
	for _, mech := range append(working(t), Off) {
		t.Run(mech, func(t *testing.T) {
			mech := mechanism(t, mech)
			dir := t.TempDir()
			out, code := run(t, mech, Policy{}, dir, "mkdir d && echo x > f && stat -c '%a %n' d f")
			if code != 0 || out != "700 d\n600 f\n" {
				t.Fatalf("exit %d, output %q; want 700 d, 600 f", code, out)
			}
		})
	}
}

// TestSeccompForeignArchitecture: the filter kills a process making a
// system call of another architecture (i386's socketcall on x86_64, whose
// socket creation the socket rules cannot see) and refuses x32 ones; it
// judges the address family on the low 32 bits; without network every
// socket(2) is refused, with network only AF_UNIX and only below Landlock
// ABI 9. Checked on the assembled program for each of the three policies
// (the test host has no 32-bit programs to run).
func TestSeccompForeignArchitecture(t *testing.T) {
	const (
		auditArchI386   = 0x40000003
		auditArchX86_64 = 0xc000003e
		auditArchARM    = 0x40000028
		auditArchARM64  = 0xc00000b7
	)
	native, foreign := uint32(auditArchX86_64), uint32(auditArchI386)
	if unix.SYS_SOCKET != 41 { // arm64
		native, foreign = auditArchARM64, auditArchARM
	}
	eacces := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	enosys := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	for _, pol := range []struct {
		name                   string
		network, unixScoped    bool
		unixSocket, inetSocket uint32 // socket(AF_UNIX), socket(AF_INET)
	}{
		{"no network", false, false, eacces, eacces},
		{"no network, ABI 9", false, true, eacces, eacces},
		{"network", true, false, eacces, allow},
		{"network, ABI 9", true, true, allow, allow},
	} {
		t.Run(pol.name, func(t *testing.T) {
			prog, err := seccompProgram(pol.network, pol.unixScoped)
			if err != nil {
				t.Skip(err)
			}
			vm, err := bpf.NewVM(prog)
			if err != nil {
				t.Fatal(err)
			}
			// seccomp_data as the program reads it: 32-bit words (the VM
			// loads them big-endian), 64-bit arguments low word first.
			call := func(archID uint32, nr int, args ...uint64) uint32 {
				d := make([]byte, 64)
				binary.BigEndian.PutUint32(d[0:], uint32(nr))
				binary.BigEndian.PutUint32(d[4:], archID)
				for i, a := range args {
					binary.BigEndian.PutUint32(d[16+8*i:], uint32(a))
					binary.BigEndian.PutUint32(d[16+8*i+4:], uint32(a>>32))
				}
				got, err := vm.Run(d)
				if err != nil {
					t.Fatal(err)
				}
				return uint32(got)
			}
			for _, c := range []struct {
				name string
				got  uint32
				want uint32
			}{
				{"foreign architecture", call(foreign, 102, 1), unix.SECCOMP_RET_KILL_PROCESS},
				{"foreign architecture, native socket number", call(foreign, unix.SYS_SOCKET, unix.AF_INET), unix.SECCOMP_RET_KILL_PROCESS},
				{"socket(AF_UNIX)", call(native, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), pol.unixSocket},
				{"socket(AF_UNIX | 1<<32)", call(native, unix.SYS_SOCKET, 1<<32|unix.AF_UNIX, unix.SOCK_STREAM), pol.unixSocket},
				{"socket(AF_INET)", call(native, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), pol.inetSocket},
				{"socket(AF_INET6 | 1<<32)", call(native, unix.SYS_SOCKET, 1<<32|unix.AF_INET6, unix.SOCK_STREAM), pol.inetSocket},
				{"socket(AF_UNIX+2)", call(native, unix.SYS_SOCKET, unix.AF_UNIX+2, unix.SOCK_STREAM), pol.inetSocket},
				{"socketpair(AF_UNIX)", call(native, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM), allow},
				{"connect", call(native, unix.SYS_CONNECT, 3), allow},
				{"openat", call(native, unix.SYS_OPENAT, 3), allow},
				{"io_uring_setup", call(native, unix.SYS_IO_URING_SETUP, 8), enosys},
				{"io_uring_enter", call(native, unix.SYS_IO_URING_ENTER, 3), enosys},
				{"io_uring_register", call(native, unix.SYS_IO_URING_REGISTER, 3), enosys},
			} {
				if c.got != c.want {
					t.Errorf("%s: filter returns %#x, want %#x", c.name, c.got, c.want)
				}
			}
			if native == auditArchX86_64 {
				if got := call(native, 0x40000000|unix.SYS_SOCKET, unix.AF_INET); got&unix.SECCOMP_RET_ACTION_FULL != unix.SECCOMP_RET_ERRNO {
					t.Errorf("x32 socket: filter returns %#x, want an error", got)
				}
				if got := call(native, 0x40000000|unix.SYS_OPENAT, 3); got&unix.SECCOMP_RET_ACTION_FULL != unix.SECCOMP_RET_ERRNO {
					t.Errorf("x32 openat: filter returns %#x, want an error", got)
				}
			}
		})
	}
}
