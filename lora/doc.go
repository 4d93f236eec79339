// Package lora reads adapter files (LoRA, LoCon, LoHa, LoKr, full
// differences), matches their layers to the tensors of a base model, computes
// the weight deltas row by row for streamed baking, and extracts a
// kohya-format LoRA from the difference of two checkpoints by truncated SVD.
//
// Reading: Open (or Read) groups an adapter file's tensors into Layers by
// module name and role (see ParseKey), checks that each layer's factors fit
// together and reads the scalars (alpha, scale); factor data is read only
// when a delta is computed.
//
// Matching: a Base indexes a model's tensors by the canonical names
// stable-diffusion.cpp's name conversion gives them (package names), and
// Base.Match resolves every adapter module to a base tensor through the same
// conversion, whatever the naming of either side (kohya, PEFT, diffusers,
// ComfyUI, LyCORIS, BFL/XLabs Flux, Wan; LDM, diffusers, ComfyUI or bare
// checkpoints). Fused targets are split or joined as the base needs: a
// diffusers to_q/to_k/to_v LoRA on a BFL qkv tensor fills its row ranges,
// a fused qkv LoRA on a diffusers base is cut into them. The Plan lists, per
// changed base tensor, the Changes (row ranges of layer deltas), and every
// adapter key that changes nothing.
//
// Applying: Target.AddTo adds the deltas of any element range of a base
// tensor to float32 data, so a writer can stream: only the tensor (or the
// row chunk) being written and the factors of the layers that change it are
// in memory. The delta of a layer is strength·scale·product, where scale is
// alpha/rank (or a stored scale, or 1) and the product is up·down (LoRA,
// with a Tucker mid core folded into down), (w1a·w1b)⊙(w2a·w2b) (LoHa,
// Tucker cores too), w1⊗w2 (LoKr, each factor full or a low-rank product,
// w2 with a Tucker core) or the stored difference. DoRA layers
// (dora_scale, lora_magnitude_vector) are supported when the magnitude is
// per output row (LyCORIS's default and PEFT's); the input-axis variant is
// refused. IA3, OFT/BOFT, GLoRA and weight replacement are refused.
//
// Extracting: PlanExtract pairs the weights of two checkpoints and names
// each as kohya does for the family, Decompose computes a truncated SVD of
// a difference (randomized range finder with power iterations, one-sided
// Jacobi in float64), and ExtractLayer.Tensors gives the lora_up, lora_down
// and alpha tensors.
//
// A streamed bake (what "merge --base --lora" wires up): open the base,
// DetectBase (or take the version from the user), NewBase, Open each
// adapter, Match; refuse a plan with errors, and one with Unmatched
// entries unless told otherwise. Then for every output tensor, Plan.Target
// says whether it changes; a producer dequantizes a chunk of its rows to
// float32, calls AddTo with the chunk's element offset, and quantizes and
// writes it; after the tensor's last chunk it calls Release. Chunks of
// whole rows (RowElems) are cheapest and are needed where a DoRA layer
// applies. Only the factors of the layers changing the tensors in flight
// are in memory. Bake does all of that behind a formats.Model: the base with
// the adapters baked in, computed as it is read, which any writer that
// reads through package tensor (quantize's plans, merge's) writes as it
// would write a stored model.
//
// A streamed extraction ("lora extract"): PlanExtract; with a fixed rank,
// ExtractLayer.Rank and Shapes give every output tensor's shape before any
// decomposition (Differs lets unchanged layers be left out first), so the
// header is written first and the layers are computed one at a time (Diff,
// Decompose, Tensors). With an energy share the ranks are known only after
// decomposing, so the writer keeps the encoded factors (rank·(rows+cols)
// values per layer, small against the checkpoints) or spills them before
// writing the header. Decomposition.Kept is the share to report.
package lora
