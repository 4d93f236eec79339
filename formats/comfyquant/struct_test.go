package comfyquant

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckGroupSize(t *testing.T) {
	for _, g := range []int{4, 16, 64, 256, 1024, 4096, MaxGroupSize} {
		if err := CheckGroupSize(g); err != nil {
			t.Errorf("CheckGroupSize(%d) = %v, want nil", g, err)
		}
	}
	for _, g := range []int{-4, 0, 1, 2, 3, 8, 32, 128, 255, 257, 512, 2048, 8192, 1 << 18} {
		err := CheckGroupSize(g)
		if !errors.Is(err, ErrGroupSize) {
			t.Errorf("CheckGroupSize(%d) = %v, want ErrGroupSize", g, err)
		}
	}
	if err := CheckGroupSize(512); err == nil || !strings.Contains(err.Error(), "power of two but not of four") {
		t.Errorf("CheckGroupSize(512) = %v, want a power-of-four explanation", err)
	}
}
