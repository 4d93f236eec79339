//go:build !unix

package pipeline

// oNoFollow is 0 where the system has no O_NOFOLLOW; O_EXCL still refuses
// an existing link.
const oNoFollow = 0
