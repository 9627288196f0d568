package engine

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// paramsBackend is the software back end taking guest modules and
// recording parameter-buffer launches, to test the engine's side of
// LAUNCH_PARAMS without a GPU.
type paramsBackend struct {
	Backend
	launches *[][]byte
}

func (b paramsBackend) LoadModule(uint32, Module) error { return nil }
func (b paramsBackend) UnloadModule(uint32) error       { return nil }
func (b paramsBackend) LaunchModuleParams(_ uint32, threads uint64, p []byte) ([]gtt.Extent, error) {
	*b.launches = append(*b.launches, append([]byte{byte(threads)}, p...))
	return nil, nil
}

const paramsPTX = `.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 ptr, .param .u32 n, .param .align 8 .b8 blob[12])
{ ret; }`

// TestLaunchParams: the buffer read from graphics memory reaches the back
// end byte for byte when its length is the module's PTX parameter layout's
// (8 + 4, then 12 at offset 16: 28 bytes); a buffer of another length, a
// built-in kernel, an unknown handle and a buffer over the limit are
// KERNEL errors that launch nothing, with §6.9's code on their stream
// (400 for the handle, 1 for the sizes); zero threads launch nothing.
func TestLaunchParams(t *testing.T) {
	var launches [][]byte
	h := newHarness(t, 61, 4096, func(h *harness, c *Config) {
		c.Streams = true
		c.Backend = paramsBackend{Backend: c.Backend, launches: &launches}
	})
	img := append(append([]byte("k"), 0), paramsPTX...)
	h.write(tDataGA, img)
	params := make([]byte, 28)
	for i := range params {
		params[i] = byte(i + 1)
	}
	pga := uint64(tDataGA + 4*abi.PageSize)
	h.write(pga, params)
	h.submit(KernelLoadModule{Handle: 5, Args: 1, Image: tDataGA, Len: uint32(len(img))},
		KernelLoad{Handle: 6, Kind: abi.KernelSaxpy},
		LaunchParams{Handle: 5, Threads: 7, Params: pga, Len: 28},
		LaunchParams{Handle: 5, Threads: 0, Params: pga, Len: 28},
		Fence{Value: 1})
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %v (%v)", f, f[0].Err)
	}
	if len(launches) != 1 || launches[0][0] != 7 || !bytes.Equal(launches[0][1:], params) {
		t.Fatalf("launches %v, want one of 7 threads with the buffer", launches)
	}
	for i, tc := range []struct {
		c    LaunchParams
		cuda uint32
	}{
		{LaunchParams{Handle: 5, Threads: 1, Params: pga, Len: 24}, abi.CudaErrorInvalidValue},
		{LaunchParams{Handle: 6, Threads: 1, Params: pga, Len: 28}, abi.CudaErrorInvalidHandle},
		{LaunchParams{Handle: 8, Threads: 1, Params: pga, Len: 28}, abi.CudaErrorInvalidHandle},
		{LaunchParams{Handle: 5, Threads: 1, Params: pga, Len: abi.LaunchParamsMax + 8}, abi.CudaErrorInvalidValue},
		{LaunchParams{Handle: 5, Threads: 1, Params: ^uint64(0) - 3, Len: 28}, abi.CudaErrorInvalidValue},
	} {
		id := uint32(i + 1)
		h.pushOn(id, tc.c)
		h.submit(Fence{Value: 2})
		f := h.ev.takeFaults()
		if len(f) != 1 || f[0].Code != abi.ErrKernel || !errors.Is(f[0].Err, ErrBadKernel) {
			t.Errorf("%+v: faults %v, want one KERNEL error", tc.c, f)
		}
		if code, _ := h.e.Stream(id); code != tc.cuda {
			t.Errorf("%+v: stream %d has code %d, want %d", tc.c, id, code, tc.cuda)
		}
	}
	if len(launches) != 1 {
		t.Errorf("a refused LAUNCH_PARAMS launched: %d launches", len(launches))
	}
}
