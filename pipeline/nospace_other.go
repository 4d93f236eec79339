//go:build !windows

package pipeline

import (
	"errors"
	"syscall"
)

// isNoSpace reports whether err is a full disk (or a full quota).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
