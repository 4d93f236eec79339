// Package console is the terminal side of the sdtool command: progress
// bars that render only when stderr is a terminal (so logs and pipes never
// receive control characters), and the signal handling that turns Ctrl-C
// and SIGTERM into a cancelled context whose cause names the signal.
//
// On the map (docs/design.md) it belongs to cmd/sdtool: the engine (package
// pipeline) reports progress through a callback and stops on its context,
// and knows nothing of terminals or signals.
package console
