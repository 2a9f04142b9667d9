package store

import (
	"fmt"
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"
)

// publishImage makes path a new file (0600) holding image without another
// process ever seeing it part-written: the bytes go to an unnamed file in
// dir (O_TMPFILE), are synced, and only then is the file linked at path.
// It fails with fs.ErrExist when path is there (another process made the
// database meanwhile), and with another error when the file system or
// kernel cannot do it (no O_TMPFILE, no /proc): the caller then makes the
// database the ordinary way.
func publishImage(dir, path string, image []byte) error {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600) })
	if err != nil {
		return fmt.Errorf("unnamed file in %s: %w", dir, err)
	}
	defer unix.Close(fd)
	for b := image; len(b) > 0; {
		n, err := retryEINTR(func() (int, error) { return unix.Write(fd, b) })
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		b = b[n:]
	}
	// The data is on disk before the name is: a crash can leave no
	// database (the next start makes one) but never a torn one.
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if err == unix.EEXIST {
		return fs.ErrExist
	}
	if err != nil {
		return fmt.Errorf("link %s: %w", path, err)
	}
	return nil
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}
