package infer

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
)

// The parts register themselves from init with these functions, by the
// names the family entries use, as database/sql drivers do; a name taken
// twice is a programming error and panics.

// register adds v to the registry reg under name.
func register[V any](what string, reg map[string]V, name string, v V) {
	if _, ok := reg[name]; ok {
		panic(fmt.Sprintf("infer: %s %q registered twice", what, name))
	}
	reg[name] = v
}

// RegisterConditioner makes name a conditioner a family can name
// (Family.Conditioner): newConditioner returns it for a loaded model.
func RegisterConditioner(name string, newConditioner func(m *Model) (Conditioner, error)) {
	register("conditioner", conditioners, name, newConditioner)
}

// RegisterNetworkDetector makes detect read the configuration of the
// network name (Family.Network) from the shapes into cfg.Network.
func RegisterNetworkDetector(name string, detect func(s Shapes, md formats.Metadata, cfg *ModelConfig) error) {
	register("network detector", networkDetectors, name, detect)
}

// RegisterNetwork makes name a network a family can name (Family.Network):
// newNetwork returns it for a loaded model.
func RegisterNetwork(name string, newNetwork func(m *Model) (Network, error)) {
	register("network", networks, name, newNetwork)
}

// RegisterSchedule makes name a noise schedule a family can name
// (Family.Schedule): newSchedule returns it for a model and an image of w×h
// latent cells.
func RegisterSchedule(name string, newSchedule func(m *Model, w, h int) Schedule) {
	register("schedule", schedules, name, newSchedule)
}

// RegisterScheduler adds a sigma spacing that --scheduler can name, after
// the core's own (Schedulers).
func RegisterScheduler(s Scheduler) { schedulerNames = append(schedulerNames, s) }

// RegisterEncoderKind makes name a text encoder kind (TextEncoder.Kind).
func RegisterEncoderKind(name string, k EncoderKind) {
	register("text encoder kind", encoderKinds, name, k)
}

// RegisterVAEKind makes name a VAE kind (VAEFacts.Kind).
func RegisterVAEKind(name string, k VAEKind) { register("VAE kind", vaeKinds, name, k) }

// LookupVAEKind returns the VAE kind registered as name.
func LookupVAEKind(name string) (VAEKind, bool) {
	k, ok := vaeKinds[name]
	return k, ok
}
