package zimage

import (
	"math"
	"testing"

	"github.com/sdtool/sdtool/infer"
)

// TestZImageSchedule checks Z-Image's discrete flow sigmas against the
// time-SNR shift written out in float64 and its timestep (1000 minus the
// noise level in thousandths).
func TestZImageSchedule(t *testing.T) {
	for _, shift := range []float64{3, 1, 2.5} {
		got, err := (&zimageSchedule{shift: float32(shift)}).Sigmas(infer.SchedulerDiscrete, 4)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			u := (999 - float64(i)*333 + 1) / 1000
			want := shift * u / (1 + (shift-1)*u)
			if math.Abs(float64(got[i])-want) > 1e-6 {
				t.Errorf("shift %g: sigma %d is %g, want %g", shift, i, got[i], want)
			}
		}
		if got[4] != 0 {
			t.Errorf("shift %g: last sigma %g, want 0", shift, got[4])
		}
	}
	if got := (&zimageSchedule{shift: 3}).SigmaToT(0.25); got != 750 {
		t.Errorf("timestep at sigma 0.25: %g, want 750", got)
	}
	if got := (&zimageSchedule{shift: 3}).SigmaMax(); got != 1 {
		t.Errorf("sigma max %g, want 1", got)
	}
}
