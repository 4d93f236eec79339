//go:build unix

package formats

import "syscall"

// oNonBlock keeps opening a FIFO from blocking: a side file that turns out
// not to be a regular file is then refused instead of waiting for a writer.
const oNonBlock = syscall.O_NONBLOCK
