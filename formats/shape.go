package formats

import (
	"strconv"
	"strings"
)

// FormatShape is the one way sdtool prints a shape: PyTorch order, commas
// between dims ("[77, 64]", "[]" for a scalar), the same in inspect, in
// every plan and in diff.
func FormatShape(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
