//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// DescriptorLimit is this process's open-file limit (RLIMIT_NOFILE, soft);
// 0 where it cannot be read.
func DescriptorLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}

// Descriptors reports how many files this process has open (-1 where that
// cannot be counted) and its open-file limit (DescriptorLimit).
func Descriptors() (open int, limit uint64) {
	limit = DescriptorLimit()
	open = -1
	if f, err := os.Open("/proc/self/fd"); err == nil {
		names, _ := f.Readdirnames(-1)
		f.Close()
		if names != nil {
			open = len(names) - 1 // less the one just opened to list them
		}
	} else if f, err := os.Open("/dev/fd"); err == nil {
		names, _ := f.Readdirnames(-1)
		f.Close()
		if names != nil {
			open = len(names) - 1
		}
	}
	return open, limit
}

// descriptorError names running out of file descriptors in err: EMFILE
// (this process is at its limit) or ENFILE (the system is), with how many
// are open and the limit. With cantOpen (SQLite's "unable to open database
// file", which carries no errno) the process being at its limit is taken
// as the cause. Other errors are returned as is.
func descriptorError(err error, cantOpen bool) error {
	if err == nil || errors.Is(err, ErrTooManyFiles) {
		return err
	}
	if !cantOpen && !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
		return err
	}
	open, limit := Descriptors()
	switch {
	case errors.Is(err, syscall.EMFILE):
		return fmt.Errorf("%w (EMFILE: %d open, limit %d; raise it with ulimit -n or LimitNOFILE=): %w", ErrTooManyFiles, open, limit, err)
	case errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("%w (ENFILE: the system's file table is full; %d open here, limit %d): %w", ErrTooManyFiles, open, limit, err)
	case cantOpen && open >= 0 && limit > 0 && uint64(open)+8 >= limit:
		return fmt.Errorf("%w (EMFILE: %d open, limit %d; raise it with ulimit -n or LimitNOFILE=): %w", ErrTooManyFiles, open, limit, err)
	}
	return err
}
