package tools

import (
	"io/fs"
	"syscall"
)

// inodeOf is fi's inode and change time (ns).
func inodeOf(fi fs.FileInfo) (ino uint64, ctime int64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return st.Ino, st.Ctim.Nano()
}
