package pipeline

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// HumanBytes formats a byte count with a binary unit, the one way sdtool
// prints sizes: "512 B", "1.50 KiB", "3.41 GiB".
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for (f >= unit || f <= -unit) && i < 5 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.2f %ciB", f, "KMGTPE"[i])
}

// SizeUnits says, for --help, how ParseBytes reads a size.
const SizeUnits = "KiB, MiB, GiB, TiB are binary (1 GiB = 2^30 bytes), KB, MB, GB, TB decimal (1 GB = 10^9 bytes)"

// byteUnits are the size suffixes ParseBytes takes, lower-cased: binary
// (KiB) and decimal (KB) units, as IEC 80000-13 names them. A bare K, M, G
// or T is refused: people mean either, and a budget off by 7% is a file
// that does not fit.
var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"kib": 1 << 10, "kb": 1e3,
	"mib": 1 << 20, "mb": 1e6,
	"gib": 1 << 30, "gb": 1e9,
	"tib": 1 << 40, "tb": 1e12,
}

// ParseBytes reads a size as people write it: "1073741824", "512MiB",
// "2GiB", "1.5 GiB" (binary) or "2GB" (decimal), the inverse of
// HumanBytes (SizeUnits). It refuses a bare "2G", which could mean either,
// and negative, fractional-byte and overflowing sizes.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := byteUnits[unit]
	if len(unit) == 1 && strings.Contains("kmgt", unit) && num != "" {
		u := strings.ToUpper(unit)
		return 0, fmt.Errorf("size %q: write %s%siB (binary, 2^%d bytes per unit) or %s%sB (decimal, 10^%d)",
			s, num, u, 10*(1+strings.Index("kmgt", unit)), num, u, 3*(1+strings.Index("kmgt", unit)))
	}
	if !ok || num == "" {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit, such as 512MiB or 2GiB", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit, such as 512MiB or 2GiB", s)
	}
	n := v * mult
	if n >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	if n != math.Trunc(n) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return int64(n), nil
}

// Count is the one way sdtool prints a count with its noun: singular for
// one ("1 tensor"), plural otherwise ("0 tensors", "3 tensors").
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Examples names the first of names and counts the others, the one way
// sdtool points at a list it does not print: `"a"`, `"a" and "b"`, `"a"
// and 3 more`.
func Examples(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return strconv.Quote(names[0])
	case 2:
		return strconv.Quote(names[0]) + " and " + strconv.Quote(names[1])
	}
	return fmt.Sprintf("%q and %d more", names[0], len(names)-1)
}
