//go:build !linux

package gateway

// diskFree is unknown off Linux: the disk floor is not checked there.
func diskFree(string) (int64, bool) { return 0, false }
