package pipeline

import (
	"strconv"
	"strings"
	"testing"
)

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB", 1<<20 - 1: "1024.00 KiB",
		3_660_000: "3.49 MiB", 5 << 30: "5.00 GiB", 1 << 62: "4.00 EiB", -2048: "-2.00 KiB",
	} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"1073741824": 1 << 30, "2GiB": 2 << 30, "2 GiB": 2 << 30, "512MiB": 512 << 20, "1.5GiB": 3 << 29,
		"2gb": 2e9, "64KiB": 64 << 10, "3MB": 3_000_000, "3 mib": 3 << 20, "100B": 100, "0": 0,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1", "2XB", "1.5", "0.1KiB", "1e3", "99999999TiB"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
	// A bare unit letter could be binary or decimal: refused, with both spellings.
	if _, err := ParseBytes("3G"); err == nil || !strings.Contains(err.Error(), "3GiB (binary") || !strings.Contains(err.Error(), "3GB (decimal") {
		t.Errorf("ParseBytes(3G): %v", err)
	}
	// HumanBytes reads back.
	for _, n := range []int64{0, 512, 1 << 20, 3 << 29} {
		if got, err := ParseBytes(strings.ReplaceAll(HumanBytes(n), " ", "")); err != nil || got != n {
			t.Errorf("ParseBytes(HumanBytes(%d)) = %d, %v", n, got, err)
		}
	}
}

func TestExamples(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{{nil, ""}, {[]string{"a"}, `"a"`}, {[]string{"a", "b"}, `"a" and "b"`}, {[]string{"first_stage_model.x", "b", "c"}, `"first_stage_model.x" and 2 more`}} {
		if got := Examples(c.in); got != c.want {
			t.Errorf("Examples(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	if a, b, c := Count(1, "tensor", "tensors"), Count(0, "tensor", "tensors"), Count(3, "entry", "entries"); a != "1 tensor" || b != "0 tensors" || c != "3 entries" {
		t.Errorf("Count: %q %q %q", a, b, c)
	}
}

// FuzzParseBytes: no input panics, every accepted size is non-negative, and
// a plain decimal byte count reads back as itself.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"2GiB", "512 MiB", "1.5g", "0", "99999999999TB", "-1", "", "1e9", ".5KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
		if err == nil {
			if back, err := ParseBytes(strconv.FormatInt(n, 10)); err != nil || back != n {
				t.Fatalf("%d does not read back: %d, %v", n, back, err)
			}
		}
	})
}
