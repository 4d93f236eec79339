package longtest

import "testing"

func TestEnabledFollowsEnv(t *testing.T) {
	t.Setenv(Env, "1")
	if !Enabled() {
		t.Fatalf("%s=1 but Enabled() is false", Env)
	}
	t.Setenv(Env, "")
	if Enabled() {
		t.Fatalf("%s empty but Enabled() is true", Env)
	}
	t.Setenv(Env, "yes")
	if Enabled() {
		t.Fatalf("%s=yes is not the documented value 1, yet Enabled() is true", Env)
	}
}
