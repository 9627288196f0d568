package guest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// Convenience operations. Each submits one command (without waiting); the
// caller fences and waits. Errors are submission errors; what the device
// thinks of the command comes from Wait.

// Copy submits COPY: n bytes from src to dst (memmove).
func (d *Driver) Copy(dst, src, n uint64) error { return d.put(AppendCopy(d.buf[:0], dst, src, n)) }

// Fill submits FILL: n bytes at dst with the 32-bit pattern.
func (d *Driver) Fill(dst, n uint64, pattern uint32) error {
	return d.put(AppendFill(d.buf[:0], dst, n, pattern))
}

// DMAToGfx submits DMA_TO_GFX: n bytes from guest-physical gpa to ga.
func (d *Driver) DMAToGfx(ga, gpa, n uint64) error {
	return d.put(AppendDMAToGfx(d.buf[:0], ga, gpa, n))
}

// DMAFromGfx submits DMA_FROM_GFX: n bytes from ga to guest-physical gpa.
func (d *Driver) DMAFromGfx(ga, gpa, n uint64) error {
	return d.put(AppendDMAFromGfx(d.buf[:0], ga, gpa, n))
}

// LoadKernel submits KERNEL_LOAD of kind (abi.Kernel*) as handle.
func (d *Driver) LoadKernel(handle, kind uint32) error {
	return d.put(AppendKernelLoad(d.buf[:0], handle, kind))
}

// UnloadKernel submits KERNEL_UNLOAD of handle.
func (d *Driver) UnloadKernel(handle uint32) error {
	return d.put(AppendKernelUnload(d.buf[:0], handle))
}

// Launch submits LAUNCH of handle with args.
func (d *Driver) Launch(handle uint32, args ...uint64) error {
	return d.put(AppendLaunch(d.buf[:0], handle, args...))
}

// LaunchParams submits LAUNCH_PARAMS (docs/device-abi.md §6.9, ABI 1.2):
// guest module handle on threads threads with the n-byte parameter buffer
// the guest stored at graphics address params, laid out as the module's
// PTX declares its parameters (package engine/ptxparam computes that
// layout, as cuFuncGetParamInfo reports it).
func (d *Driver) LaunchParams(handle uint32, threads, params uint64, n uint32) error {
	return d.put(AppendLaunchParams(d.buf[:0], handle, threads, params, n))
}

// Saxpy launches a SAXPY kernel: y[i] = a*x[i] + y[i] for n floats.
func (d *Driver) Saxpy(handle uint32, n uint64, a float32, x, y uint64) error {
	return d.Launch(handle, SaxpyArgs(n, a, x, y)...)
}

// Stencil launches a STENCIL kernel: one Jacobi step of the w x h grid in
// into out.
func (d *Driver) Stencil(handle, w, h uint32, in, out uint64) error {
	return d.Launch(handle, StencilArgs(w, h, in, out)...)
}

// Render launches a RENDER kernel: frame of the w x h framebuffer at fb.
func (d *Driver) Render(handle, w, h uint32, fb, frame uint64) error {
	return d.Launch(handle, RenderArgs(w, h, fb, frame)...)
}

var errNoStaging = errors.New("guest: the bus has no DMA memory")

// Upload copies p to graphics address ga by DMA through the staging
// buffer, waiting for each chunk.
func (d *Driver) Upload(ctx context.Context, ga uint64, p []byte) error {
	if d.staging == nil {
		return errNoStaging
	}
	for len(p) > 0 {
		n := copy(d.staging, p)
		if err := d.DMAToGfx(ga, d.stagingGPA, uint64(n)); err != nil {
			return err
		}
		if err := d.Wait(ctx, d.Fence(0)); err != nil {
			return fmt.Errorf("guest: uploading to %#x: %w", ga, err)
		}
		ga, p = ga+uint64(n), p[n:]
	}
	return nil
}

// Download copies len(p) bytes at graphics address ga into p by DMA
// through the staging buffer.
func (d *Driver) Download(ctx context.Context, ga uint64, p []byte) error {
	if d.staging == nil {
		return errNoStaging
	}
	for len(p) > 0 {
		n := min(len(p), len(d.staging))
		if err := d.DMAFromGfx(ga, d.stagingGPA, uint64(n)); err != nil {
			return err
		}
		if err := d.Wait(ctx, d.Fence(0)); err != nil {
			return fmt.Errorf("guest: downloading from %#x: %w", ga, err)
		}
		copy(p, d.staging[:n])
		ga, p = ga+uint64(n), p[n:]
	}
	return nil
}

// put submits an encoding built in d.buf, keeping the buffer for reuse,
// on the current stream (SetStream).
func (d *Driver) put(cmd []byte) error {
	if d.stream != 0 {
		flags := binary.LittleEndian.Uint16(cmd[2:])
		binary.LittleEndian.PutUint16(cmd[2:], flags|uint16(d.stream)<<abi.CmdStreamShift)
	}
	d.buf = cmd
	return d.Submit(cmd)
}
