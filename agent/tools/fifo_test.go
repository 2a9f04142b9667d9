//go:build unix

package tools

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOpenRegularNeverBlocksOnFIFO (issue 35): read_file, write_file,
// send_file and the bootstrap loader stat a path before opening it, so a
// FIFO a command swaps in between the two used to hang the open (no
// writer, or no reader). OpenRegular opens without blocking and refuses
// what it opened unless it is a regular file.
func TestOpenRegularNeverBlocksOnFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "swapped"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, flag := range []int{os.O_RDONLY, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND} {
		done := make(chan error, 1)
		go func() {
			f, _, err := OpenRegular(root, "swapped", flag, FileMode)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("flag %#x: a FIFO was opened as a file", flag)
			} else if flag == os.O_RDONLY && !errors.Is(err, ErrNotRegular) {
				t.Errorf("flag %#x: %v, want ErrNotRegular", flag, err)
			}
		case <-time.After(5 * time.Second):
			// Unblock the stuck open so the test ends.
			if w, err := os.OpenFile(filepath.Join(dir, "swapped"), os.O_RDWR, 0); err == nil {
				w.Close()
			}
			t.Fatalf("flag %#x: opening a FIFO blocked", flag)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "plain.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, fi, err := OpenRegular(root, "plain.txt", os.O_RDONLY, 0)
	if err != nil || fi.Size() != 1 {
		t.Fatalf("a regular file: %v, %v", fi, err)
	}
	f.Close()
}
