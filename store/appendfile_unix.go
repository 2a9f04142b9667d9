//go:build unix

package store

import (
	"io/fs"
	"syscall"
)

// appendFile writes b at the end of the file at path in one write(2)
// (more only if the kernel takes part of it), opening and closing it
// around the write; create makes the file (0600), failing with
// fs.ErrExist when it is there already. It goes by the system calls
// rather than os.File: an os.OpenFile also tries to register the file
// with the runtime's poller (an epoll_ctl that fails for a regular file)
// and sets a finalizer, and transcripts open their file for every line.
func appendFile(path string, b []byte, create bool) error {
	flags := syscall.O_WRONLY | syscall.O_APPEND | syscall.O_CLOEXEC
	if create {
		flags |= syscall.O_CREAT | syscall.O_EXCL
	}
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, flags, 0o600)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	for len(b) > 0 && err == nil {
		var n int
		n, err = syscall.Write(fd, b)
		switch {
		case err == syscall.EINTR:
			err = nil
		case err == nil && n == 0:
			err = syscall.EIO
		case err == nil:
			b = b[n:]
		}
	}
	if err != nil {
		err = &fs.PathError{Op: "write", Path: path, Err: err}
	}
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = &fs.PathError{Op: "close", Path: path, Err: cerr}
	}
	return err
}
