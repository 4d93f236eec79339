// Package layering holds sdtool's package map (the layers of its design) as a table and a
// test that holds the import graph to it: every package imports only
// packages of lower layers, convert, quantize and merge never import each
// other, and only native and its subpackages use cgo. It has no code of its
// own; run `go test ./internal/layering` after adding a package, and give
// the package a row in the table when the test asks for one.
package layering
