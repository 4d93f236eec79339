package names

import (
	"fmt"

	"github.com/sdtool/sdtool/family"
)

// Version is a model version as sd.cpp's SDVersion distinguishes them; the
// name conversion depends on its family.
type Version int

// Model versions. Unknown is sd.cpp's VERSION_COUNT: no family matched, and
// only the version-independent rules apply. Other stands for the families
// sd.cpp recognises by a marker tensor but whose diffusion-model and VAE
// renames this package does not model (LTX, Ernie,
// PID, Qwen-Image 2.1/Layered, Wan 2.2 S2V, ...); it converts like Unknown.
const (
	Unknown        Version = iota // no family matched (sd.cpp's VERSION_COUNT)
	SD1                           // Stable Diffusion 1.x
	SD1Inpaint                    // SD 1.x inpainting (9 input channels)
	SD1Pix2Pix                    // SD 1.x InstructPix2Pix (8 input channels)
	SD1TinyUNet                   // SD 1.x without a middle block (distilled)
	SDXS512DS                     // SDXS-512 (tiny UNet, tiny autoencoder)
	SD2                           // Stable Diffusion 2.x
	SD2Inpaint                    // SD 2.x inpainting
	SD2TinyUNet                   // SD 2.x without a middle block
	SDXS09                        // SDXS-0.9 (tiny autoencoder)
	SDXL                          // Stable Diffusion XL
	SDXLInpaint                   // SDXL inpainting
	SDXLPix2Pix                   // SDXL InstructPix2Pix
	SDXLVega                      // Segmind Vega
	SDXLSSD1B                     // Segmind SSD-1B
	SVD                           // Stable Video Diffusion
	SD3                           // Stable Diffusion 3 / 3.5
	Flux                          // Flux.1 (and Chroma)
	FluxFill                      // Flux.1 Fill
	FluxControls                  // Flux.1 Canny/Depth
	Flex2                         // Flex.2
	ChromaRadiance                // Chroma Radiance
	OvisImage                     // Ovis-Image
	Flux2                         // Flux.2
	Flux2Klein                    // Flux.2 Klein
	LongCat                       // LongCat-Image
	Wan2                          // Wan 2.1 and 2.2 (14B)
	Wan22I2V                      // Wan 2.2 image-to-video
	Wan22TI2V                     // Wan 2.2 TI2V 5B
	QwenImage                     // Qwen-Image
	Anima                         // Anima
	ZImage                        // Z-Image
	HunyuanVideo                  // Hunyuan Video
	Krea2                         // Krea 2
	Other                         // a family sd.cpp knows and this package does not model
	numVersions
)

var versionNames = [numVersions]string{
	Unknown:        "unknown",
	SD1:            "sd1",
	SD1Inpaint:     "sd1-inpaint",
	SD1Pix2Pix:     "sd1-pix2pix",
	SD1TinyUNet:    "sd1-tiny-unet",
	SDXS512DS:      "sdxs-512-ds",
	SD2:            "sd2",
	SD2Inpaint:     "sd2-inpaint",
	SD2TinyUNet:    "sd2-tiny-unet",
	SDXS09:         "sdxs-09",
	SDXL:           "sdxl",
	SDXLInpaint:    "sdxl-inpaint",
	SDXLPix2Pix:    "sdxl-pix2pix",
	SDXLVega:       "sdxl-vega",
	SDXLSSD1B:      "sdxl-ssd1b",
	SVD:            "svd",
	SD3:            "sd3",
	Flux:           "flux",
	FluxFill:       "flux-fill",
	FluxControls:   "flux-controls",
	Flex2:          "flex-2",
	ChromaRadiance: "chroma-radiance",
	OvisImage:      "ovis-image",
	Flux2:          "flux2",
	Flux2Klein:     "flux2-klein",
	LongCat:        "longcat",
	Wan2:           "wan2",
	Wan22I2V:       "wan2.2-i2v",
	Wan22TI2V:      "wan2.2-ti2v",
	QwenImage:      "qwen-image",
	Anima:          "anima",
	ZImage:         "z-image",
	HunyuanVideo:   "hunyuan-video",
	Krea2:          "krea2",
	Other:          "other",
}

// String returns the version's short name ("sd1", "sdxl-inpaint", "flux").
func (v Version) String() string {
	if v >= 0 && v < numVersions {
		return versionNames[v]
	}
	return fmt.Sprintf("version(%d)", int(v))
}

// ParseVersion returns the version whose String is s.
func ParseVersion(s string) (Version, error) {
	for v, n := range versionNames {
		if n == s {
			return Version(v), nil
		}
	}
	return Unknown, fmt.Errorf("names: unknown model version %q", s)
}

// IsSD1 reports whether v is in the SD 1.x family (sd.cpp's sd_version_is_sd1).
func (v Version) IsSD1() bool {
	return v == SD1 || v == SD1Inpaint || v == SD1Pix2Pix || v == SD1TinyUNet || v == SDXS512DS
}

// IsSD2 reports whether v is in the SD 2.x family.
func (v Version) IsSD2() bool {
	return v == SD2 || v == SD2Inpaint || v == SD2TinyUNet || v == SDXS09
}

// IsSDXL reports whether v is in the SDXL family.
func (v Version) IsSDXL() bool {
	return v == SDXL || v == SDXLInpaint || v == SDXLPix2Pix || v == SDXLVega || v == SDXLSSD1B
}

// IsUNet reports whether v is a UNet model (SD 1.x, 2.x or XL); several
// prefixes and the LoRA separator rule depend on it.
func (v Version) IsUNet() bool { return v.IsSD1() || v.IsSD2() || v.IsSDXL() }

// IsFlux reports whether v is in the Flux.1 family (sd.cpp's sd_version_is_flux).
func (v Version) IsFlux() bool {
	return v == Flux || v == FluxFill || v == FluxControls || v == Flex2 || v == ChromaRadiance || v == OvisImage
}

// IsFlux2 reports whether v is in the Flux.2 family.
func (v Version) IsFlux2() bool { return v == Flux2 || v == Flux2Klein }

// usesFluxDiT reports whether the diffusion model's diffusers names are
// renamed with the Flux table (Flux.1, Flux.2 and LongCat share it in sd.cpp).
func (v Version) usesFluxDiT() bool { return v.IsFlux() || v.IsFlux2() || v == LongCat }

// usesWanVAE reports whether the VAE is Wan's (renamed with the Wan table
// instead of the SD autoencoder's).
func (v Version) usesWanVAE() bool {
	return v == Wan2 || v == Wan22I2V || v == Wan22TI2V || v == QwenImage || v == Anima || v == Krea2
}

// usesTAE reports whether sd.cpp stores this version's VAE under "tae."
// rather than "first_stage_model." (the SDXS models ship a tiny autoencoder).
func (v Version) usesTAE() bool { return v == SDXS512DS || v == SDXS09 }

// notModelled are the sd.cpp versions (97d2990) that the family table names
// and this package converts like Unknown: their diffusion-model and VAE
// renames are not modelled here.
var notModelled = map[string]bool{
	"ltxav": true, "minimax-h3": true, "wan2.2-s2v": true, "mage-flow": true, "qwen-image-layered": true,
}

// Lookup returns the Version of an sd.cpp version name as the family table
// spells it: Unknown for "" (sd.cpp found none), Other for a version this
// package does not model.
func Lookup(sdcpp string) Version {
	if sdcpp == "" {
		return Unknown
	}
	if v, err := ParseVersion(sdcpp); err == nil {
		return v
	}
	return Other
}

// VersionOf returns the version sd.cpp's get_sd_version reports for a file
// whose detected architecture is a (family.Detect of the tensors as sd.cpp
// loads them): the family table's sd.cpp columns decide it.
func VersionOf(a family.Architecture) Version { return Lookup(a.SDCpp()) }
