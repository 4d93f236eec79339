//go:build !unix

package formats

// oNonBlock is 0 where the system has no O_NONBLOCK; the Stat check before
// the open still refuses FIFOs and devices.
const oNonBlock = 0
