//go:build !linux

package store

import "errors"

// publishImage is Linux's (O_TMPFILE); elsewhere a new database is made
// from fresh-sqlite.sql.
func publishImage(dir, path string, image []byte) error {
	return errors.ErrUnsupported
}
