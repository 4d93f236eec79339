//go:build unix

package pipeline

import "syscall"

// oNoFollow makes opening the .partial file fail on a symlink even where
// O_EXCL alone would be enough, so that no future change of flags can make
// the writer follow a link planted there.
const oNoFollow = syscall.O_NOFOLLOW
