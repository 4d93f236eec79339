package pipeline

import "testing"

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
