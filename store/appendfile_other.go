//go:build !unix

package store

import "os"

// appendFile writes b at the end of the file at path, opening and closing
// it around the write; create makes the file (0600), failing with
// fs.ErrExist when it is there already.
func appendFile(path string, b []byte, create bool) error {
	flags := os.O_WRONLY | os.O_APPEND
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
