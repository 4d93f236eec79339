package infer_test

import (
	"slices"
	"testing"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/infer"
)

// TestFamiliesAgreeWithTable: every engine entry runs a family of the
// table that says generate runs it, and every family the table says
// generate runs has an engine entry, so docs/families.md and inspect tell
// the truth.
func TestFamiliesAgreeWithTable(t *testing.T) {
	has := map[string]bool{}
	for _, f := range infer.Families {
		tf := family.ByID(f.ID)
		switch {
		case tf == nil:
			t.Errorf("engine family %s: ID %q is not in the family table", f.Name(), f.ID)
		case !tf.Generate:
			t.Errorf("engine family %s: the table says generate does not run %s", f.Name(), f.ID)
		case f.Variant != "" && !slices.ContainsFunc(tf.Detect, func(r family.Rule) bool { return r.Variant == f.Variant }):
			// One vocabulary: an engine variant is one the table detects.
			t.Errorf("engine family %s: the table detects no variant %q of %s", f.Name(), f.Variant, f.ID)
		}
		has[f.ID] = true
	}
	for _, id := range family.Generators() {
		if !has[id] {
			t.Errorf("the family table says generate runs %s, but no engine family has that ID", id)
		}
	}
}
