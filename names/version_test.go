package names

import (
	"testing"

	"github.com/sdtool/sdtool/family"
)

// TestTableVersions: every sd.cpp version name in the family table is one
// this package knows (ParseVersion) or lists as not modelled, so that
// Lookup never turns a misspelt name into Other.
func TestTableVersions(t *testing.T) {
	for _, f := range family.Families {
		vs := []string{""}
		for _, r := range f.Detect {
			vs = append(vs, r.Variant)
		}
		for _, v := range vs {
			sd := f.SDCppFor(v)
			if sd == "" || notModelled[sd] {
				continue
			}
			if _, err := ParseVersion(sd); err != nil {
				t.Errorf("%s %q: sd.cpp name %q: %v", f.ID, v, sd, err)
			}
		}
	}
	if Lookup("") != Unknown || Lookup("sdxl-inpaint") != SDXLInpaint || Lookup("ltxav") != Other {
		t.Error("Lookup")
	}
}
