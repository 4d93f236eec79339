package names

import (
	"fmt"
	"testing"
)

// fluxDiffusersNames is a Flux.1 diffusers transformer's tensor list.
func fluxDiffusersNames() []string {
	var l nameList
	p := "model.diffusion_model."
	l.wb(p, "x_embedder", "context_embedder", "proj_out", "norm_out.linear",
		"time_text_embed.timestep_embedder.linear_1", "time_text_embed.timestep_embedder.linear_2",
		"time_text_embed.text_embedder.linear_1", "time_text_embed.text_embedder.linear_2",
		"time_text_embed.guidance_embedder.linear_1", "time_text_embed.guidance_embedder.linear_2")
	for i := 0; i < 19; i++ {
		b := fmt.Sprintf("%stransformer_blocks.%d.", p, i)
		l.wb(b, "norm1.linear", "norm1_context.linear", "attn.to_q", "attn.to_k", "attn.to_v",
			"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out",
			"ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2")
		l.add(b, "attn.norm_q.weight", "attn.norm_k.weight", "attn.norm_added_q.weight", "attn.norm_added_k.weight")
	}
	for i := 0; i < 38; i++ {
		b := fmt.Sprintf("%ssingle_transformer_blocks.%d.", p, i)
		l.wb(b, "norm.linear", "attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp", "proj_out")
		l.add(b, "attn.norm_q.weight", "attn.norm_k.weight")
	}
	return l
}

// benchConvert reports wall and CPU nanoseconds per name; on a shared
// machine the CPU figure is the one to read.
func benchConvert(b *testing.B, names []string, v Version) {
	b.ReportAllocs()
	cpu0 := cpuNanos()
	for b.Loop() {
		for _, n := range names {
			Convert(n, v)
		}
	}
	per := float64(b.N) * float64(len(names))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/name")
	if cpu := cpuNanos() - cpu0; cpu0 > 0 && cpu > 0 {
		b.ReportMetric(float64(cpu)/per, "cpu-ns/name")
	}
}

// Names of an original checkpoint, which the converter leaves alone.
func BenchmarkConvertSD1LDM(b *testing.B) { benchConvert(b, sd1LDM(), SD1) }

// A diffusers folder, where nearly every name is rewritten.
func BenchmarkConvertSD1Diffusers(b *testing.B) { benchConvert(b, sd1Diffusers(true), SD1) }

func BenchmarkConvertFluxDiffusers(b *testing.B) { benchConvert(b, fluxDiffusersNames(), Flux) }

// 2,000 names through ConvertAll with its collision check: a whole SD 1.x
// diffusers folder (every name rewritten) and 800-odd names no rule touches.
func BenchmarkConvertAll2000(b *testing.B) {
	names := append(sd1Diffusers(false), fluxDiffusersNames()...)[:2000]
	b.ReportAllocs()
	cpu0 := cpuNanos()
	for b.Loop() {
		if _, err := ConvertAll(names, SD1); err != nil {
			b.Fatal(err)
		}
	}
	if cpu := cpuNanos() - cpu0; cpu0 > 0 && cpu > 0 {
		b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/2000names")
	}
}

// A floor to read the figures above against on a noisy machine: one map
// lookup per name (the least any table-driven converter costs) over the same
// diffusers names.
func BenchmarkBaselineMapLookup(b *testing.B) {
	names := sd1Diffusers(true)
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = n
	}
	var sink int
	cpu0 := cpuNanos()
	for b.Loop() {
		for _, n := range names {
			sink += len(m[n])
		}
	}
	per := float64(b.N) * float64(len(names))
	if cpu := cpuNanos() - cpu0; cpu0 > 0 && cpu > 0 {
		b.ReportMetric(float64(cpu)/per, "cpu-ns/name")
	}
	if sink == 0 {
		b.Fatal("no lookups")
	}
}
