package names

import (
	"fmt"
	"sort"
	"testing"
)

// The two SD 1.x layouts, written down independently of the rename tables:
// what a diffusers folder holds (unet/, vae/, text_encoder/, loaded with the
// unet., vae. and te. prefixes sd.cpp's diffusers loader adds) and what an
// original LDM checkpoint holds. The round trip checks that converting the
// first gives exactly the second.

type nameList []string

func (l *nameList) add(prefix string, parts ...string) {
	for _, p := range parts {
		*l = append(*l, prefix+p)
	}
}

// wb lists a module's weight and bias.
func wb(m string) []string { return []string{m + ".weight", m + ".bias"} }

func (l *nameList) wb(prefix string, modules ...string) {
	for _, m := range modules {
		l.add(prefix, wb(m)...)
	}
}

// SD 1.x UNet channels per level: 320, 640, 1280, 1280.
var sd1Channels = []int{320, 640, 1280, 1280}

func diffusersTransformer(l *nameList, p string) { transformerDepth(l, p, 1) }

// transformerDepth lists a spatial transformer with depth blocks; diffusers
// and LDM use the same names inside it.
func transformerDepth(l *nameList, p string, depth int) {
	l.wb(p, "norm", "proj_in", "proj_out")
	for d := 0; d < depth; d++ {
		tb := fmt.Sprintf("%stransformer_blocks.%d.", p, d)
		for _, a := range []string{"attn1", "attn2"} {
			l.add(tb+a+".", "to_q.weight", "to_k.weight", "to_v.weight")
			l.wb(tb+a+".", "to_out.0")
		}
		l.wb(tb, "ff.net.0.proj", "ff.net.2", "norm1", "norm2", "norm3")
	}
}

func diffusersResnet(l *nameList, p string, shortcut bool) {
	l.wb(p, "norm1", "conv1", "time_emb_proj", "norm2", "conv2")
	if shortcut {
		l.wb(p, "conv_shortcut")
	}
}

func sd1DiffusersUNet() nameList {
	var l nameList
	p := "unet."
	l.wb(p, "conv_in", "time_embedding.linear_1", "time_embedding.linear_2")
	for i := 0; i < 4; i++ {
		for j := 0; j < 2; j++ {
			// The first resnet of a level changes the channel count (except level 0).
			diffusersResnet(&l, fmt.Sprintf("%sdown_blocks.%d.resnets.%d.", p, i, j), j == 0 && i > 0 && sd1Channels[i] != sd1Channels[i-1])
			if i < 3 {
				diffusersTransformer(&l, fmt.Sprintf("%sdown_blocks.%d.attentions.%d.", p, i, j))
			}
		}
		if i < 3 {
			l.wb(fmt.Sprintf("%sdown_blocks.%d.downsamplers.0.", p, i), "conv")
		}
	}
	diffusersResnet(&l, p+"mid_block.resnets.0.", false)
	diffusersTransformer(&l, p+"mid_block.attentions.0.")
	diffusersResnet(&l, p+"mid_block.resnets.1.", false)
	for i := 0; i < 4; i++ {
		for j := 0; j < 3; j++ {
			// Every up resnet sees the skip concatenation, so all have a shortcut.
			diffusersResnet(&l, fmt.Sprintf("%sup_blocks.%d.resnets.%d.", p, i, j), true)
			if i > 0 {
				diffusersTransformer(&l, fmt.Sprintf("%sup_blocks.%d.attentions.%d.", p, i, j))
			}
		}
		if i < 3 {
			l.wb(fmt.Sprintf("%sup_blocks.%d.upsamplers.0.", p, i), "conv")
		}
	}
	l.wb(p, "conv_norm_out", "conv_out")
	return l
}

func ldmTransformer(l *nameList, p string) {
	// The LDM SpatialTransformer uses the same inner names as diffusers.
	diffusersTransformer(l, p)
}

func ldmResBlock(l *nameList, p string, skip bool) {
	l.wb(p, "in_layers.0", "in_layers.2", "emb_layers.1", "out_layers.0", "out_layers.3")
	if skip {
		l.wb(p, "skip_connection")
	}
}

func sd1LDMUNet() nameList {
	var l nameList
	p := "model.diffusion_model."
	l.wb(p, "input_blocks.0.0", "time_embed.0", "time_embed.2")
	// input_blocks 1..11: two ResBlocks (+ attention on levels 0-2) per level,
	// then a downsampling op after levels 0-2.
	for b := 1; b <= 11; b++ {
		level, pos := (b-1)/3, (b-1)%3
		if pos == 2 {
			l.wb(fmt.Sprintf("%sinput_blocks.%d.0.", p, b), "op")
			continue
		}
		ldmResBlock(&l, fmt.Sprintf("%sinput_blocks.%d.0.", p, b), pos == 0 && (b == 4 || b == 7))
		if level < 3 {
			ldmTransformer(&l, fmt.Sprintf("%sinput_blocks.%d.1.", p, b))
		}
	}
	ldmResBlock(&l, p+"middle_block.0.", false)
	ldmTransformer(&l, p+"middle_block.1.")
	ldmResBlock(&l, p+"middle_block.2.", false)
	// output_blocks 0..11: a ResBlock each, attention from block 3 on, and an
	// upsampler closing levels 0-2 (module 1 on level 0, which has no attention).
	for b := 0; b < 12; b++ {
		ldmResBlock(&l, fmt.Sprintf("%soutput_blocks.%d.0.", p, b), true)
		if b >= 3 {
			ldmTransformer(&l, fmt.Sprintf("%soutput_blocks.%d.1.", p, b))
		}
		switch b {
		case 2:
			l.wb(p+"output_blocks.2.1.", "conv")
		case 5, 8:
			l.wb(fmt.Sprintf("%soutput_blocks.%d.2.", p, b), "conv")
		}
	}
	l.wb(p, "out.0", "out.2")
	return l
}

// VAE channels per level: 128, 256, 512, 512.
var vaeChannels = []int{128, 256, 512, 512}

func vaeMidDiffusers(l *nameList, p string, newAttn bool) {
	for _, r := range []string{"resnets.0.", "resnets.1."} {
		l.wb(p+"mid_block."+r, "norm1", "conv1", "norm2", "conv2")
	}
	a := p + "mid_block.attentions.0."
	if newAttn {
		l.wb(a, "group_norm", "to_q", "to_k", "to_v", "to_out.0")
	} else {
		l.wb(a, "group_norm", "query", "key", "value", "proj_attn")
	}
}

func sd1DiffusersVAE(newAttn bool) nameList {
	var l nameList
	p := "vae."
	l.wb(p, "encoder.conv_in", "encoder.conv_norm_out", "encoder.conv_out", "quant_conv", "post_quant_conv", "decoder.conv_in", "decoder.conv_norm_out", "decoder.conv_out")
	for i := 0; i < 4; i++ {
		for j := 0; j < 2; j++ {
			r := fmt.Sprintf("%sencoder.down_blocks.%d.resnets.%d.", p, i, j)
			l.wb(r, "norm1", "conv1", "norm2", "conv2")
			if j == 0 && i > 0 && vaeChannels[i] != vaeChannels[i-1] {
				l.wb(r, "conv_shortcut")
			}
		}
		if i < 3 {
			l.wb(fmt.Sprintf("%sencoder.down_blocks.%d.downsamplers.0.", p, i), "conv")
		}
	}
	vaeMidDiffusers(&l, p+"encoder.", newAttn)
	vaeMidDiffusers(&l, p+"decoder.", newAttn)
	// The decoder runs from the deepest level: up_blocks.i works at
	// vaeChannels[3-i] and its first resnet shrinks from the level below.
	for i := 0; i < 4; i++ {
		for j := 0; j < 3; j++ {
			r := fmt.Sprintf("%sdecoder.up_blocks.%d.resnets.%d.", p, i, j)
			l.wb(r, "norm1", "conv1", "norm2", "conv2")
			if j == 0 && i > 0 && vaeChannels[3-i] != vaeChannels[4-i] {
				l.wb(r, "conv_shortcut")
			}
		}
		if i < 3 {
			l.wb(fmt.Sprintf("%sdecoder.up_blocks.%d.upsamplers.0.", p, i), "conv")
		}
	}
	return l
}

func sd1LDMVAE() nameList {
	var l nameList
	p := "first_stage_model."
	l.wb(p, "encoder.conv_in", "encoder.norm_out", "encoder.conv_out", "quant_conv", "post_quant_conv", "decoder.conv_in", "decoder.norm_out", "decoder.conv_out")
	for lv := 0; lv < 4; lv++ {
		for j := 0; j < 2; j++ {
			r := fmt.Sprintf("%sencoder.down.%d.block.%d.", p, lv, j)
			l.wb(r, "norm1", "conv1", "norm2", "conv2")
			if j == 0 && lv > 0 && vaeChannels[lv] != vaeChannels[lv-1] {
				l.wb(r, "nin_shortcut")
			}
		}
		if lv < 3 {
			l.wb(fmt.Sprintf("%sencoder.down.%d.downsample.", p, lv), "conv")
		}
	}
	for _, side := range []string{"encoder.", "decoder."} {
		l.wb(p+side+"mid.block_1.", "norm1", "conv1", "norm2", "conv2")
		l.wb(p+side+"mid.block_2.", "norm1", "conv1", "norm2", "conv2")
		l.wb(p+side+"mid.attn_1.", "norm", "q", "k", "v", "proj_out")
	}
	// LDM numbers decoder levels by resolution: up.lv works at vaeChannels[lv]
	// and its first block shrinks from the level above; levels 1-3 upsample.
	for lv := 0; lv < 4; lv++ {
		for j := 0; j < 3; j++ {
			r := fmt.Sprintf("%sdecoder.up.%d.block.%d.", p, lv, j)
			l.wb(r, "norm1", "conv1", "norm2", "conv2")
			if j == 0 && lv < 3 && vaeChannels[lv] != vaeChannels[lv+1] {
				l.wb(r, "nin_shortcut")
			}
		}
		if lv > 0 {
			l.wb(fmt.Sprintf("%sdecoder.up.%d.upsample.", p, lv), "conv")
		}
	}
	return l
}

func clipTextModel(l *nameList, p string) {
	l.add(p, "text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight")
	for i := 0; i < 12; i++ {
		e := fmt.Sprintf("%stext_model.encoder.layers.%d.", p, i)
		l.wb(e, "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj", "layer_norm1", "layer_norm2", "mlp.fc1", "mlp.fc2")
	}
	l.wb(p, "text_model.final_layer_norm")
}

func sd1Diffusers(newAttn bool) nameList {
	l := sd1DiffusersUNet()
	l = append(l, sd1DiffusersVAE(newAttn)...)
	clipTextModel(&l, "te.")
	return l
}

func sd1LDM() nameList {
	l := sd1LDMUNet()
	l = append(l, sd1LDMVAE()...)
	clipTextModel(&l, "cond_stage_model.transformer.")
	return l
}

func sortedCopy(l []string) []string {
	c := append([]string(nil), l...)
	sort.Strings(c)
	return c
}

func TestRoundTripSD1Diffusers(t *testing.T) {
	ldm := sd1LDM()
	if n := len(ldm); n < 1000 {
		t.Fatalf("LDM layout has only %d names", n)
	}
	for _, newAttn := range []bool{false, true} {
		diff := sd1Diffusers(newAttn)
		if len(diff) != len(ldm) {
			t.Fatalf("layouts differ in size: diffusers %d, LDM %d", len(diff), len(ldm))
		}
		got, err := ConvertAll(diff, SD1)
		if err != nil {
			t.Fatalf("ConvertAll (new attention names %v): %v", newAttn, err)
		}
		// Order is kept: each output belongs to the input at its index.
		for i, n := range diff {
			if got[i] != Convert(n, SD1) {
				t.Fatalf("ConvertAll[%d] = %q is not Convert(%q)", i, got[i], n)
			}
		}
		want := map[string]bool{}
		for _, n := range ldm {
			want[n] = true
		}
		var missing []string
		for _, g := range got {
			if !want[g] {
				missing = append(missing, g)
			}
		}
		if len(missing) > 0 {
			t.Errorf("new attention names %v: %d converted names are not LDM names, e.g. %q", newAttn, len(missing), missing[:min(5, len(missing))])
		}
		gs, ws := sortedCopy(got), sortedCopy(ldm)
		for i := range gs {
			if gs[i] != ws[i] {
				t.Errorf("sorted name %d: converted %q, LDM %q", i, gs[i], ws[i])
				break
			}
		}
	}
}

// Already-converted names are fixed points: sd.cpp's converter leaves the
// LDM layout alone, for every family whose rules touch it.
func TestLDMNamesUnchanged(t *testing.T) {
	for _, v := range []Version{SD1, SD2, SD1TinyUNet, Unknown} {
		for _, n := range sd1LDM() {
			if got := Convert(n, v); got != n {
				t.Errorf("Convert(%q, %v) = %q, want it unchanged", n, v, got)
			}
		}
	}
}

// SDXL: three levels (320, 640, 1280), attention with depth 2 and 10 on the
// two deeper ones, no attention on the first.
var sdxlDepth = []int{0, 2, 10}

func sdxlDiffusersUNet() nameList {
	var l nameList
	p := "unet."
	l.wb(p, "conv_in", "time_embedding.linear_1", "time_embedding.linear_2", "add_embedding.linear_1", "add_embedding.linear_2")
	for i := 0; i < 3; i++ {
		for j := 0; j < 2; j++ {
			diffusersResnet(&l, fmt.Sprintf("%sdown_blocks.%d.resnets.%d.", p, i, j), j == 0 && i > 0)
			if sdxlDepth[i] > 0 {
				transformerDepth(&l, fmt.Sprintf("%sdown_blocks.%d.attentions.%d.", p, i, j), sdxlDepth[i])
			}
		}
		if i < 2 {
			l.wb(fmt.Sprintf("%sdown_blocks.%d.downsamplers.0.", p, i), "conv")
		}
	}
	diffusersResnet(&l, p+"mid_block.resnets.0.", false)
	transformerDepth(&l, p+"mid_block.attentions.0.", 10)
	diffusersResnet(&l, p+"mid_block.resnets.1.", false)
	for i := 0; i < 3; i++ {
		depth := sdxlDepth[2-i] // up_blocks.0 is the deepest level
		for j := 0; j < 3; j++ {
			diffusersResnet(&l, fmt.Sprintf("%sup_blocks.%d.resnets.%d.", p, i, j), true)
			if depth > 0 {
				transformerDepth(&l, fmt.Sprintf("%sup_blocks.%d.attentions.%d.", p, i, j), depth)
			}
		}
		if i < 2 {
			l.wb(fmt.Sprintf("%sup_blocks.%d.upsamplers.0.", p, i), "conv")
		}
	}
	l.wb(p, "conv_norm_out", "conv_out")
	return l
}

func sdxlLDMUNet() nameList {
	var l nameList
	p := "model.diffusion_model."
	l.wb(p, "input_blocks.0.0", "time_embed.0", "time_embed.2", "label_emb.0.0", "label_emb.0.2")
	for b := 1; b <= 8; b++ {
		level, pos := (b-1)/3, (b-1)%3
		if pos == 2 {
			l.wb(fmt.Sprintf("%sinput_blocks.%d.0.", p, b), "op")
			continue
		}
		ldmResBlock(&l, fmt.Sprintf("%sinput_blocks.%d.0.", p, b), pos == 0 && level > 0)
		if sdxlDepth[level] > 0 {
			transformerDepth(&l, fmt.Sprintf("%sinput_blocks.%d.1.", p, b), sdxlDepth[level])
		}
	}
	ldmResBlock(&l, p+"middle_block.0.", false)
	transformerDepth(&l, p+"middle_block.1.", 10)
	ldmResBlock(&l, p+"middle_block.2.", false)
	for b := 0; b < 9; b++ {
		depth := sdxlDepth[2-b/3]
		ldmResBlock(&l, fmt.Sprintf("%soutput_blocks.%d.0.", p, b), true)
		up := 1 // the upsampler follows the attention when there is one
		if depth > 0 {
			transformerDepth(&l, fmt.Sprintf("%soutput_blocks.%d.1.", p, b), depth)
			up = 2
		}
		if b == 2 || b == 5 {
			l.wb(fmt.Sprintf("%soutput_blocks.%d.%d.", p, b, up), "conv")
		}
	}
	l.wb(p, "out.0", "out.2")
	return l
}

// The SDXL diffusers UNet converts to the LDM one, the upsampler of
// up_blocks.0 included (output_blocks.2.2, by way of sd.cpp's fix-up rule).
func TestRoundTripSDXLDiffusersUNet(t *testing.T) {
	diff, ldm := sdxlDiffusersUNet(), sdxlLDMUNet()
	if len(diff) != len(ldm) || len(ldm) < 1500 {
		t.Fatalf("layout sizes: diffusers %d, LDM %d", len(diff), len(ldm))
	}
	got, err := ConvertAll(diff, SDXL)
	if err != nil {
		t.Fatal(err)
	}
	gs, ws := sortedCopy(got), sortedCopy(ldm)
	for i := range gs {
		if gs[i] != ws[i] {
			t.Fatalf("sorted name %d: converted %q, LDM %q", i, gs[i], ws[i])
		}
	}
	for _, n := range ldm {
		if c := Convert(n, SDXL); c != n {
			t.Errorf("LDM name %q converts to %q", n, c)
		}
	}
}
