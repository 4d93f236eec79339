package main

import (
	"os"
	"strings"
	"testing"
)

// What a newcomer tripped over in the README (issue 34): a design file the
// repository lacks, a cgo-free build that overwrote the optimised ./sdtool,
// go install @latest before any release, and a test command whose long
// cases were not explained.
func TestReadmeNewcomerPitfalls(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(string(data)), " ")
	if strings.Contains(s, "DESIGN.md") {
		t.Error("README.md points to DESIGN.md, which the repository does not have")
	}
	if strings.Contains(s, "CGO_ENABLED=0 go build ./cmd/sdtool") {
		t.Error("README.md's cgo-free build writes ./sdtool over the optimised one")
	}
	for _, want := range []string{"needs a tagged release", "SDTOOL_LONG=1 go test -timeout 60m ./...", "--version"} {
		if !strings.Contains(s, want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}
