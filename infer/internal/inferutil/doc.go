// Package inferutil is the test kit that the engine's packages share:
// weights and graphs for block tests, reference math, in-memory models,
// tiny-model loading and the sd-cli parity harness. Only tests import it.
package inferutil
