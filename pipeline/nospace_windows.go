//go:build windows

package pipeline

import (
	"errors"
	"syscall"

	"golang.org/x/sys/windows"
)

// isNoSpace reports whether err is a full disk: Windows reports
// ERROR_DISK_FULL or ERROR_HANDLE_DISK_FULL rather than ENOSPC.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, windows.ERROR_DISK_FULL) ||
		errors.Is(err, windows.ERROR_HANDLE_DISK_FULL)
}
