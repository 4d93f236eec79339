// Package metrics measures how far apart two generated images or two tensors
// are: PSNR and SSIM on 8-bit RGB images, cosine similarity and
// CompareTensors (max and mean absolute error, RMSE, cosine) on float32
// tensors. generate --compare uses it to say how much a quantized model
// changes an image; it depends only on the standard library.
package metrics
