// Package layering holds the package map of docs/design.md as a table and
// tests that hold the import graph and the document to it: every package
// imports only packages of lower layers, convert, quantize and merge never
// import each other, only native and its subpackages use cgo, the sdtool
// binary links no test support, and the document's map is the table. It has no code of its
// own; run `go test ./internal/layering` after adding a package, and give
// the package a row in the table when the test asks for one.
package layering
