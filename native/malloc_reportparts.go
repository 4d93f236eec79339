//go:build cgo

package native

/*
#include <stdlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
static void sdt_mmap_from(int n) { mallopt(M_MMAP_THRESHOLD, n); }
#else
static void sdt_mmap_from(int n) { (void)n; }
#endif
*/
import "C"

// mmapFrom is the size from which glibc's malloc gives every allocation
// (ggml's weight, slot and compute buffers) a mapping of its own, which a
// free returns to the system.
const mmapFrom = 1 << 20

// glibc raises its mmap threshold to the size of each mapped block freed,
// up to 32 MiB, so after the first model is closed buffers up to that
// size come from the heap and stay in the process when freed: a report
// of a Flux of full widths with its ladder after the source peaked 120
// MiB higher (1502 MiB within --max-memory 1330MiB, 1383 MiB with the
// threshold fixed). A fixed threshold keeps RSS to what is allocated.
func init() { C.sdt_mmap_from(mmapFrom) }
