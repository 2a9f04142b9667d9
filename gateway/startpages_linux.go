package gateway

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseStartPages drops the gateway's mappings of its own binary's
// read-only pages (code, read-only data, the function tables), once start
// is over.
//
// Package initialisation and start-up touch code and tables all over the
// binary (every linked package's init functions lie among its code, and
// the kernel maps 64 KiB around each fault): 30 MB or more of resident
// pages that an idle gateway does not use again. MADV_DONTNEED on a
// private mapping that was never written only unmaps: the pages stay in
// the page cache, and code that runs later maps back what it uses with a
// minor fault. (Where the page cache holds the binary in large folios —
// Linux 6.x caches a binary the Go linker just wrote in 2 MB folios — a
// fault maps the whole folio back, so this gives back little there;
// docs/performance.md.) It returns the bytes of mappings given back
// (resident or not).
func releaseStartPages() (int64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	type mapping struct {
		start, end uint64
		anon       bool // holds a page that was written (copied from the file)
	}
	var maps []mapping
	cur := -1 // the index in maps of the mapping whose lines are being read; -1: not one of ours
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "Anonymous:" {
			if cur >= 0 && len(f) > 1 {
				maps[cur].anon = f[1] != "0"
			}
			continue
		}
		// A mapping's first line: 00400000-02800000 r-xp 00000000 fd:01 1234  /path/to/herald
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok || len(f) < 2 {
			continue
		}
		cur = -1
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		// Only the binary's mappings that are neither writable nor shared.
		if err1 != nil || err2 != nil || end <= start || len(f) < 6 || f[5] != exe || strings.ContainsAny(f[1], "ws") {
			continue
		}
		cur = len(maps)
		maps = append(maps, mapping{start: start, end: end, anon: true}) // until its Anonymous line says 0
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	var total int64
	for _, m := range maps {
		// A read-only mapping with written pages (RELRO: relocations the
		// loader wrote before making it read-only) would lose them.
		if m.anon {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_DONTNEED); errno != 0 {
			return total, errno
		}
		total += int64(m.end - m.start)
	}
	return total, nil
}
