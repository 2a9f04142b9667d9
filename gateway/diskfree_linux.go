package gateway

import "golang.org/x/sys/unix"

// diskFree is the space left for an unprivileged writer on the file
// system of dir.
func diskFree(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * st.Bsize, true
}
