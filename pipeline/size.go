package pipeline

import "fmt"

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
