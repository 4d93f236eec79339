package family

import "strings"

// stable-diffusion.cpp's version detection (get_sd_version in
// src/model_loader.cpp, 97d2990) as the table states it. sd.cpp looks at a
// file's tensors under fixed names, so which version it reports depends on
// where a component sits and on what else the file holds, not only on the
// component's family. Three columns of the table say so:
//
//   - Family.SDCpp and Rule.SDCpp name the version (per family and per
//     variant);
//   - Family.SDCppAt lists the component prefixes under which sd.cpp sees the
//     family at all (it finds a diffusion model only under
//     "model.diffusion_model.", a diffusers UNet under "unet.", a CLIP only
//     under the names it reads the token embedding from); Rule.SDCppAt
//     overrides it for one variant;
//   - Family.SDCppNeeds lists what else the file must hold for sd.cpp to name
//     the version (a UNet is SD 1.x or 2.x to it only with the CLIP whose
//     token-embedding width says which, SDXL only with a second text
//     encoder).
//
// A rule may also carry conditions that sd.cpp tests on top of the rule's
// own (Rule.sdIf: the real widths it multiplies in to tell Wan 2.2 apart).
// Architecture.SDCpp combines them; nothing else about sd.cpp is coded, and
// family/sdcpp_test.go holds the result to a rule-by-rule account of
// get_sd_version.

// Need is one thing sd.cpp must find besides the component itself before it
// names the component's version.
type Need struct {
	// Family is the component family that must be present ("" for any
	// recognised component).
	Family string
	// Prefixes are where: the component's prefix must start with one of
	// them.
	Prefixes []string
}

// sdcppDiffusionAt is where sd.cpp sees a diffusion model unless the family
// says otherwise: the prefix its loader gives --diffusion-model files and
// the single-file checkpoints use.
var sdcppDiffusionAt = []string{"model.diffusion_model."}

// sees reports whether sd.cpp sees the component c of family f.
func (f *Family) sees(c Component) bool {
	if f == nil || c.byPrefix {
		return false
	}
	at := f.SDCppAt
	for _, r := range f.Detect {
		if r.Variant == c.Variant && r.SDCppAt != nil {
			at = r.SDCppAt
		}
	}
	if at == nil && f.Kind == KindDiffusion {
		at = sdcppDiffusionAt
	}
	for _, p := range at {
		if c.Prefix == p {
			return true
		}
	}
	return false
}

// satisfied reports whether the architecture holds what n asks for.
func (a Architecture) satisfied(n Need) bool {
	for _, c := range a.Components {
		if n.Family != "" && (c.Name != n.Family || !c.Family().sees(c)) {
			continue
		}
		for _, p := range n.Prefixes {
			if strings.HasPrefix(c.Prefix, p) {
				return true
			}
		}
	}
	return false
}

// SDCpp returns the version name sd.cpp's get_sd_version reports for a file
// holding these components, as loaded (with the prefixes its loader adds):
// the first diffusion component that sd.cpp sees and whose needs the file
// meets names it; failing that, the last text encoder sd.cpp reads a
// version from (a lone CLIP-L is an SD 1.x model to it); "" when sd.cpp
// finds none (its VERSION_COUNT).
func (a Architecture) SDCpp() string {
	for _, c := range a.Components {
		f := c.Family()
		if c.Kind != KindDiffusion || !f.sees(c) {
			continue
		}
		met := true
		for _, n := range f.SDCppNeeds {
			met = met && a.satisfied(n)
		}
		if met && c.sdcppIfFailed {
			return f.SDCpp
		}
		if met {
			return f.SDCppFor(c.Variant)
		}
	}
	// sd.cpp keeps the last token embedding it meets.
	last := ""
	for _, c := range a.Components {
		if f := c.Family(); c.Kind != KindDiffusion && f.SDCpp != "" && f.sees(c) {
			last = f.SDCpp
		}
	}
	return last
}

// SDCppModel returns sd.cpp's version name for the main component alone,
// whatever the rest of the file holds: the name conversion that fits a
// component sdtool places itself (a UNet given as --diffusion-model beside
// --clip_l files, a scaled-down test model whose widths sd.cpp would not
// read). It is "" when sd.cpp has no version for the variant (the SDXL
// refiner) or the main component is no diffusion model.
func (a Architecture) SDCppModel() string {
	f := a.Main()
	if f == nil || f.Kind != KindDiffusion {
		return ""
	}
	return f.SDCppFor(a.Variant())
}
