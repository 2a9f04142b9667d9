//go:build !unix

package store

import (
	"errors"
	"fmt"
	"syscall"
)

// Descriptors reports -1 and 0 where they cannot be read.
func Descriptors() (open int, limit uint64) { return -1, 0 }

// DescriptorLimit reports 0 where it cannot be read.
func DescriptorLimit() uint64 { return 0 }

func descriptorError(err error, _ bool) error {
	if err != nil && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) && !errors.Is(err, ErrTooManyFiles) {
		return fmt.Errorf("%w: %w", ErrTooManyFiles, err)
	}
	return err
}
