//go:build !cgo

package native

import "github.com/sdtool/sdtool/formats"

// The twin of graph.go for binaries built without cgo: the same API, so that
// callers need no build tags. Nothing can be built: NewContext and
// NewCPUBackend return ErrNoCgo, and since no Context or Backend exists,
// the methods below are never reached; ops panic with ErrNoCgo (which
// Recover turns into an error) and the rest return ErrNoCgo or zero values.

// A Context holds ggml tensor and graph descriptors; without cgo none can be made.
type Context struct{}

// Tensor is a ggml tensor descriptor; without cgo it is always the zero value.
type Tensor struct{}

// Graph is a computation graph; without cgo none can be made.
type Graph struct{}

// Backend is ggml's CPU backend; without cgo none can be started.
type Backend struct{}

// Buffer is backend memory; without cgo none can be allocated.
type Buffer struct{}

// Allocator places a graph's tensors in a compute buffer; without cgo none exists.
type Allocator struct{}

func noCgo() Tensor { panic(ErrNoCgo) }

// NewContext returns ErrNoCgo.
func NewContext(n, graphSize int) (*Context, error) { return nil, ErrNoCgo }

// Free does nothing.
func (c *Context) Free() {}

// Remaining returns 0.
func (c *Context) Remaining() int { return 0 }

// NewTensor returns ErrNoCgo.
func (c *Context) NewTensor(t formats.DType, ne ...int64) (Tensor, error) { return Tensor{}, ErrNoCgo }

// Valid reports false.
func (t Tensor) Valid() bool { return false }

// Ne returns zeros.
func (t Tensor) Ne() [4]int64 { return [4]int64{} }

// Nb returns zeros.
func (t Tensor) Nb() [4]int64 { return [4]int64{} }

// Type returns F32, the zero type.
func (t Tensor) Type() formats.DType { return formats.F32 }

// Bytes returns 0.
func (t Tensor) Bytes() int64 { return 0 }

// Elements returns 0.
func (t Tensor) Elements() int64 { return 0 }

// SetName returns t.
func (t Tensor) SetName(name string) Tensor { return t }

// SetInput returns t.
func (t Tensor) SetInput() Tensor { return t }

// SetOutput returns t.
func (t Tensor) SetOutput() Tensor { return t }

// SetData returns ErrNoCgo.
func (t Tensor) SetData(data []byte) error { return ErrNoCgo }

// SetDataAt returns ErrNoCgo.
func (t Tensor) SetDataAt(data []byte, off int64) error { return ErrNoCgo }

// SetF32 returns ErrNoCgo.
func (t Tensor) SetF32(v []float32) error { return ErrNoCgo }

// SetI32 returns ErrNoCgo.
func (t Tensor) SetI32(v []int32) error { return ErrNoCgo }

// F32 returns ErrNoCgo.
func (t Tensor) F32() ([]float32, error) { return nil, ErrNoCgo }

// Add panics with ErrNoCgo.
func (c *Context) Add(a, b Tensor) Tensor { return noCgo() }

// Sub panics with ErrNoCgo.
func (c *Context) Sub(a, b Tensor) Tensor { return noCgo() }

// Mul panics with ErrNoCgo.
func (c *Context) Mul(a, b Tensor) Tensor { return noCgo() }

// MulMat panics with ErrNoCgo.
func (c *Context) MulMat(a, b Tensor) Tensor { return noCgo() }

// Scale panics with ErrNoCgo.
func (c *Context) Scale(a Tensor, s float32) Tensor { return noCgo() }

// ScaleBias panics with ErrNoCgo.
func (c *Context) ScaleBias(a Tensor, s, b float32) Tensor { return noCgo() }

// PadEnd panics with ErrNoCgo.
func (c *Context) PadEnd(a Tensor, p0, p1 int) Tensor { return noCgo() }

// Clamp panics with ErrNoCgo.
func (c *Context) Clamp(a Tensor, lo, hi float32) Tensor { return noCgo() }

// SiLU panics with ErrNoCgo.
func (c *Context) SiLU(a Tensor) Tensor { return noCgo() }

// GELU panics with ErrNoCgo.
func (c *Context) GELU(a Tensor) Tensor { return noCgo() }

// GELUQuick panics with ErrNoCgo.
func (c *Context) GELUQuick(a Tensor) Tensor { return noCgo() }

// Norm panics with ErrNoCgo.
func (c *Context) Norm(a Tensor, eps float32) Tensor { return noCgo() }

// RMSNorm panics with ErrNoCgo.
func (c *Context) RMSNorm(a Tensor, eps float32) Tensor { return noCgo() }

// GroupNorm panics with ErrNoCgo.
func (c *Context) GroupNorm(a Tensor, groups int, eps float32) Tensor { return noCgo() }

// SoftMax panics with ErrNoCgo.
func (c *Context) SoftMax(a Tensor, scale float32) Tensor { return noCgo() }

// DiagMaskInf panics with ErrNoCgo.
func (c *Context) DiagMaskInf(a Tensor, nPast int) Tensor { return noCgo() }

// Conv2D panics with ErrNoCgo.
func (c *Context) Conv2D(k, x Tensor, stride, pad int) Tensor { return noCgo() }

// UpscaleNearest panics with ErrNoCgo.
func (c *Context) UpscaleNearest(a Tensor, factor int) Tensor { return noCgo() }

// TimestepEmbedding panics with ErrNoCgo.
func (c *Context) TimestepEmbedding(t Tensor, dim, maxPeriod int) Tensor { return noCgo() }

// Concat panics with ErrNoCgo.
func (c *Context) Concat(a, b Tensor, dim int) Tensor { return noCgo() }

// Cont panics with ErrNoCgo.
func (c *Context) Cont(a Tensor) Tensor { return noCgo() }

// Cast panics with ErrNoCgo.
func (c *Context) Cast(a Tensor, t formats.DType) Tensor { return noCgo() }

// Permute panics with ErrNoCgo.
func (c *Context) Permute(a Tensor, ax0, ax1, ax2, ax3 int) Tensor { return noCgo() }

// Reshape panics with ErrNoCgo.
func (c *Context) Reshape(a Tensor, ne ...int64) Tensor { return noCgo() }

// View panics with ErrNoCgo.
func (c *Context) View(a Tensor, ne [4]int64, nb1, nb2, nb3, offset int64) Tensor { return noCgo() }

// GetRows panics with ErrNoCgo.
func (c *Context) GetRows(a, idx Tensor) Tensor { return noCgo() }

// NewGraph panics with ErrNoCgo.
func (c *Context) NewGraph(size int) *Graph { panic(ErrNoCgo) }

// Expand does nothing.
func (g *Graph) Expand(t Tensor) {}

// Nodes returns 0.
func (g *Graph) Nodes() int { return 0 }

// NewCPUBackend returns ErrNoCgo.
func NewCPUBackend(n int) (*Backend, error) { return nil, ErrNoCgo }

// SetThreads does nothing.
func (b *Backend) SetThreads(n int) {}

// Threads returns 0.
func (b *Backend) Threads() int { return 0 }

// Free does nothing.
func (b *Backend) Free() {}

// Abort does nothing: no graph computes without cgo.
func (b *Backend) Abort() {}

// ResetAbort does nothing.
func (b *Backend) ResetAbort() {}

// AllocContext returns ErrNoCgo.
func (b *Backend) AllocContext(ctx *Context) (*Buffer, error) { return nil, ErrNoCgo }

// Size returns 0.
func (buf *Buffer) Size() int64 { return 0 }

// Free does nothing.
func (buf *Buffer) Free() {}

// NewAllocator returns an allocator that allocates nothing.
func (b *Backend) NewAllocator() *Allocator { return &Allocator{} }

// Alloc returns ErrNoCgo.
func (a *Allocator) Alloc(g *Graph) error { return ErrNoCgo }

// Size returns 0.
func (a *Allocator) Size() int64 { return 0 }

// Free does nothing.
func (a *Allocator) Free() {}

// Compute returns ErrNoCgo.
func (b *Backend) Compute(g *Graph) error { return ErrNoCgo }

// CPUFeatures reports no features: no ggml is linked.
func CPUFeatures() (avx2, fma, f16c bool) { return false, false, false }
