// Package benchutil holds what the writing commands' benchmarks share: a
// synthetic F16 model of a chosen size, written once per process, and the
// peak resident memory of the process.
//
// It sits with the test support above the commands (docs/design.md); only
// benchmarks import it.
package benchutil
