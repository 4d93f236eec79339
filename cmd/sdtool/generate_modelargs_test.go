package main

import (
	"maps"
	"testing"
)

func TestParseModelArgs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string
		bad  bool
	}{
		{in: "", want: nil},
		{in: "chroma_use_dit_mask=false", want: map[string]string{"chroma_use_dit_mask": "false"}},
		{in: "chroma_use_t5_mask=true, chroma_t5_mask_pad=3", want: map[string]string{"chroma_use_t5_mask": "true", "chroma_t5_mask_pad": "3"}},
		{in: "chroma_use_dit_mask", bad: true},
		{in: "=1", bad: true},
	} {
		got, err := parseModelArgs(c.in)
		if (err != nil) != c.bad || !c.bad && !maps.Equal(got, c.want) {
			t.Errorf("%q: %v, %v; want %v (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}
