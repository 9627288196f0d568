package nvidia

// The CUDA model's guest grid kernels: the LAUNCH_GRID test kernels of
// docs/device-abi.md §6.10 (testdata/kernels13.ptx), played in Go by their
// PTX entry names, bit-identical to the PTX: mul.rn.f32 and add.rn.f32 are
// Go float32 products and sums, each rounded (the explicit conversions
// forbid fused multiply-adds), and a computed NaN is the GPU's canonical
// one. They read and write the model's device address space; an access
// outside every allocation, or a misaligned one, fails the kernel as the
// GPU does: the launch returns, and the next Sync of the device reports
// CUDA_ERROR_LAUNCH_FAILED. The error is sticky, as CUDA's is for the
// context: from then on every call of the model device that does work
// (Sync, copies, launches, allocations) answers it. A model device is a
// process's context on one GPU: every back end of the process on that
// model GPU fails with it.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// Function numbers of the grid kernels; names the model does not know get
// numbers from mUnknownKernel on, so that their launch fails saying which.
const (
	mVecAdd cuda.Function = iota + 100
	mScaleAdd
	mMatMulTiled
	mEmpty
	mScribble

	mUnknownKernel cuda.Function = 1 << 20
)

var gridKernelNames = map[string]cuda.Function{
	"vecAdd": mVecAdd, "scaleAdd": mScaleAdd, "matMulTiled": mMatMulTiled, "empty": mEmpty,
	"scribble": mScribble,
}

// gridParamBytes is each grid kernel's parameter buffer size (its PTX
// parameter layout, docs/device-abi.md §6.10).
var gridParamBytes = map[cuda.Function]int{mVecAdd: 28, mScaleAdd: 24, mMatMulTiled: 28, mEmpty: 0, mScribble: 20}

// modelLaunchFailed is CUDA_ERROR_LAUNCH_FAILED (cuda.h), what the model's
// Sync returns after a grid kernel failed.
const modelLaunchFailed cuda.Result = 719

// matMulTile is matMulTiled's tile edge (its PTX's 16×16 .shared tiles).
const matMulTile = 16

// gridState is the model's grid-kernel bookkeeping (under modelDevice.mu).
type gridState struct {
	unknown map[cuda.Function]string // entry names the model does not run
	fault   *cuda.Error              // the first failed kernel: sticky
}

// gridFunction numbers kernel name: a grid kernel's, or a new one that
// fails when launched.
func (d *modelDevice) gridFunction(name string) cuda.Function {
	if f, ok := gridKernelNames[name]; ok {
		return f
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.grid.unknown == nil {
		d.grid.unknown = map[cuda.Function]string{}
	}
	f := mUnknownKernel + cuda.Function(len(d.grid.unknown))
	d.grid.unknown[f] = name
	return f
}

// lost returns the sticky error of a failed kernel as call op answers it,
// or nil while no kernel has failed.
func (d *modelDevice) lost(op string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.grid.fault == nil {
		return nil
	}
	e := *d.grid.fault
	e.Op = op
	return &e
}

// LaunchBuffer runs a grid kernel with its parameter buffer. A launch the
// driver would refuse (an unknown kernel, a buffer of the wrong size)
// fails here; a kernel that faults is reported by the next Sync.
func (d *modelDevice) LaunchBuffer(f cuda.Function, grid, block [3]uint32, _ uint32, _ cuda.Stream, params []byte) error {
	d.run.Lock() // as Launch: a kernel is device work the local reader must not race
	defer d.run.Unlock()
	if err := d.lost("cuLaunchKernel"); err != nil {
		return err
	}
	n, ok := gridParamBytes[f]
	if !ok {
		d.mu.Lock()
		name, known := d.grid.unknown[f]
		d.mu.Unlock()
		if known {
			return fmt.Errorf("model: the CUDA model runs no kernel %q (it runs vecAdd, scaleAdd, matMulTiled, empty and scribble)", name)
		}
		return fmt.Errorf("model: function %d is no grid kernel", f)
	}
	if len(params) != n {
		return fmt.Errorf("model: kernel %d takes %d parameter bytes, got %d", f, n, len(params))
	}
	le := binary.LittleEndian
	threadsX := uint64(grid[0]) * uint64(block[0])
	var err error
	switch f {
	case mVecAdd:
		err = d.vecAdd(le.Uint64(params[0:]), le.Uint64(params[8:]), le.Uint64(params[16:]), gridCount(int32(le.Uint32(params[24:])), threadsX))
	case mScaleAdd:
		err = d.scaleAdd(le.Uint64(params[0:]), le.Uint64(params[8:]), math.Float32frombits(le.Uint32(params[16:])),
			gridCount(int32(le.Uint32(params[20:])), threadsX))
	case mScribble:
		err = d.scribble(le.Uint64(params[0:]), le.Uint64(params[8:]), le.Uint32(params[16:]))
	case mMatMulTiled:
		err = d.matMulTiled(le.Uint64(params[0:]), le.Uint64(params[8:]), le.Uint64(params[16:]), int32(le.Uint32(params[24:])), grid, block)
	}
	if err != nil {
		d.mu.Lock()
		if d.grid.fault == nil {
			d.grid.fault = &cuda.Error{Op: "cuStreamSynchronize", Code: modelLaunchFailed, Name: "CUDA_ERROR_LAUNCH_FAILED", Detail: err.Error()}
		}
		d.mu.Unlock()
	}
	return nil
}

// gridCount is how many elements a 1-D kernel with bound n touches when
// threads threads run it: those with i < n.
func gridCount(n int32, threads uint64) uint64 {
	if n <= 0 {
		return 0
	}
	return min(uint64(n), threads)
}

// f32s returns the n float32s at device address p, or the error of a
// kernel touching them: misaligned, or not all in one allocation (the
// model's at panics there, as a GPU faults).
func (d *modelDevice) f32s(p, n uint64) (v []float32, err error) {
	if n == 0 {
		return nil, nil
	}
	if p%4 != 0 {
		return nil, fmt.Errorf("model: misaligned float at device address %#x", p)
	}
	if n > math.MaxUint64/8 {
		return nil, fmt.Errorf("model: %d floats at device address %#x", n, p)
	}
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("model: illegal address: %v", r)
		}
	}()
	b := d.at(p, 4*n)
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// putF32s stores v at device address p (checked by f32s before).
func (d *modelDevice) putF32s(p uint64, v []float32) {
	if len(v) == 0 {
		return
	}
	b := d.at(p, 4*uint64(len(v)))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
}

// canonF32 is the GPU's result for a computed NaN: the canonical 0x7fffffff.
func canonF32(v float32) float32 {
	if v != v {
		return math.Float32frombits(0x7fffffff)
	}
	return v
}

// vecAdd: c[i] = a[i] + b[i] (add.rn.f32) for i < n.
func (d *modelDevice) vecAdd(a, b, c, n uint64) error {
	av, err := d.f32s(a, n)
	if err != nil {
		return err
	}
	bv, err := d.f32s(b, n)
	if err != nil {
		return err
	}
	if _, err := d.f32s(c, n); err != nil {
		return err
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = canonF32(av[i] + bv[i])
	}
	d.putF32s(c, out)
	return nil
}

// scaleAdd: y[i] = a*x[i] + y[i] (mul.rn.f32, then add.rn.f32) for i < n.
func (d *modelDevice) scaleAdd(x, y uint64, a float32, n uint64) error {
	xv, err := d.f32s(x, n)
	if err != nil {
		return err
	}
	yv, err := d.f32s(y, n)
	if err != nil {
		return err
	}
	for i := range yv {
		yv[i] = canonF32(float32(a*xv[i]) + yv[i])
	}
	d.putF32s(y, yv)
	return nil
}

// matMulTiled: C = A·B for n×n row-major matrices, 16×16 tiles: each
// C[row][col] the grid covers (row, col < n) is the sum over k below
// 16·(n/16), in order from 0.0f, of A[row][k]·B[k][col], each product and
// sum rounded (mul.rn.f32, add.rn.f32). The PTX indexes its tiles with the
// thread's x and y, so it runs only with blocks of 16×16×1.
func (d *modelDevice) matMulTiled(a, b, c uint64, n int32, grid, block [3]uint32) error {
	if block != [3]uint32{matMulTile, matMulTile, 1} {
		return fmt.Errorf("model: matMulTiled with block %v (the model runs it with 16x16x1)", block)
	}
	if n <= 0 {
		return nil
	}
	nn := uint64(n)
	av, err := d.f32s(a, nn*nn)
	if err != nil {
		return err
	}
	bv, err := d.f32s(b, nn*nn)
	if err != nil {
		return err
	}
	cv, err := d.f32s(c, nn*nn)
	if err != nil {
		return err
	}
	kEnd := nn / matMulTile * matMulTile
	rows := min(nn, uint64(grid[1])*matMulTile)
	cols := min(nn, uint64(grid[0])*matMulTile)
	for row := range rows {
		for col := range cols {
			var acc float32
			for k := range kEnd {
				acc = float32(acc + float32(av[row*nn+k]*bv[k*nn+col]))
			}
			cv[row*nn+col] = canonF32(acc)
		}
	}
	d.putF32s(c, cv)
	return nil
}

// scribble: the hostile-guest kernel, words 32-bit stores of pattern from
// device address dst, wherever that is (docs/nvidia.md, "Isolation"). The
// model stores all of them when the range lies in one allocation of the
// device (its context's memory: another vGPU's in the same process
// included) and faults the kernel, storing none, when it does not (a GPU
// would store the reachable words and then fault; the kernel fails either
// way).
func (d *modelDevice) scribble(dst, words uint64, pattern uint32) (err error) {
	if words == 0 {
		return nil
	}
	if dst%4 != 0 || words > math.MaxUint64/8 {
		return fmt.Errorf("model: scribble of %d words at device address %#x", words, dst)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model: illegal address: %v", r)
		}
	}()
	b := d.at(dst, 4*words)
	for i := uint64(0); i < words; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], pattern)
	}
	return nil
}
