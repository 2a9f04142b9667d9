//go:build !linux

package tools

import "io/fs"

// inodeOf is zero where the bootstrap cache checks mtime, size and mode
// only.
func inodeOf(fs.FileInfo) (ino uint64, ctime int64) { return 0, 0 }
