package guest

import (
	"encoding/binary"
	"math"

	"github.com/gmig-dev/gmig/abi"
)

// Command encoders (docs/device-abi.md §6). Each appends one little-endian
// command to b and returns the extended slice. They do not validate their
// arguments: the suite uses them to build commands the device must refuse.

// AppendHeader appends a bare command header. With AppendNop-style padding
// it builds arbitrary (also malformed) commands.
func AppendHeader(b []byte, op, flags uint16, size uint32) []byte {
	b = binary.LittleEndian.AppendUint16(b, op)
	b = binary.LittleEndian.AppendUint16(b, flags)
	return binary.LittleEndian.AppendUint32(b, size)
}

// AppendNop appends a NOP of size bytes (8..256, a multiple of 8) whose
// padding is zero.
func AppendNop(b []byte, size uint32) []byte {
	b = AppendHeader(b, abi.OpNop, 0, size)
	for i := uint32(abi.CmdHeaderSize); i < size; i++ {
		b = append(b, 0)
	}
	return b
}

// AppendCopy appends COPY (§6.1): n bytes from src to dst (memmove).
func AppendCopy(b []byte, dst, src, n uint64) []byte {
	b = AppendHeader(b, abi.OpCopy, 0, abi.CmdCopySize)
	return appendU64s(b, dst, src, n)
}

// AppendFill appends FILL (§6.2): n bytes at dst filled with pattern.
func AppendFill(b []byte, dst, n uint64, pattern uint32) []byte {
	b = AppendHeader(b, abi.OpFill, 0, abi.CmdFillSize)
	b = appendU64s(b, dst, n)
	b = binary.LittleEndian.AppendUint32(b, pattern)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// AppendDMAToGfx appends DMA_TO_GFX (§6.3): n bytes from guest-physical
// gpa to graphics address ga.
func AppendDMAToGfx(b []byte, ga, gpa, n uint64) []byte {
	b = AppendHeader(b, abi.OpDMAToGfx, 0, abi.CmdDMASize)
	return appendU64s(b, ga, gpa, n)
}

// AppendDMAFromGfx appends DMA_FROM_GFX (§6.3): n bytes from graphics
// address ga to guest-physical gpa.
func AppendDMAFromGfx(b []byte, ga, gpa, n uint64) []byte {
	b = AppendHeader(b, abi.OpDMAFromGfx, 0, abi.CmdDMASize)
	return appendU64s(b, ga, gpa, n)
}

// AppendFence appends FENCE (§6.4) with abi.Fence* flags.
func AppendFence(b []byte, flags uint16, value, addr uint64) []byte {
	b = AppendHeader(b, abi.OpFence, flags, abi.CmdFenceSize)
	return appendU64s(b, value, addr)
}

// AppendKernelLoad appends KERNEL_LOAD (§6.5).
func AppendKernelLoad(b []byte, handle, kind uint32) []byte {
	b = AppendHeader(b, abi.OpKernelLoad, 0, abi.CmdKernelLoadSize)
	b = binary.LittleEndian.AppendUint32(b, handle)
	return binary.LittleEndian.AppendUint32(b, kind)
}

// AppendKernelLoadModule appends KERNEL_LOAD_MODULE (§6.8, ABI 1.1): the
// image (entry name, NUL, PTX text) of n bytes at graphics address image
// becomes kernel object handle, launched with nargs arguments.
func AppendKernelLoadModule(b []byte, handle, nargs uint32, image uint64, n uint32) []byte {
	b = AppendHeader(b, abi.OpKernelLoadModule, 0, abi.CmdKernelLoadModuleSize)
	b = binary.LittleEndian.AppendUint32(b, handle)
	b = binary.LittleEndian.AppendUint32(b, nargs)
	b = binary.LittleEndian.AppendUint64(b, image)
	b = binary.LittleEndian.AppendUint32(b, n)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// ModuleImage is the image KERNEL_LOAD_MODULE reads: entry, NUL, PTX.
func ModuleImage(entry string, ptx []byte) []byte {
	return append(append([]byte(entry), 0), ptx...)
}

// AppendKernelUnload appends KERNEL_UNLOAD (§6.6).
func AppendKernelUnload(b []byte, handle uint32) []byte {
	b = AppendHeader(b, abi.OpKernelUnload, 0, abi.CmdKernelUnloadSize)
	b = binary.LittleEndian.AppendUint32(b, handle)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// AppendLaunch appends LAUNCH (§6.7) of kernel handle with args.
func AppendLaunch(b []byte, handle uint32, args ...uint64) []byte {
	size := uint32(abi.CmdLaunchBaseSize + 8*len(args))
	b = AppendHeader(b, abi.OpLaunch, 0, size)
	b = binary.LittleEndian.AppendUint32(b, handle)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(args)))
	return appendU64s(b, args...)
}

// AppendLaunchParams appends LAUNCH_PARAMS (§6.9, ABI 1.2): guest module
// handle on threads threads with the n-byte parameter buffer at graphics
// address params.
func AppendLaunchParams(b []byte, handle uint32, threads, params uint64, n uint32) []byte {
	b = AppendHeader(b, abi.OpLaunchParams, 0, abi.CmdLaunchParamsSize)
	b = binary.LittleEndian.AppendUint32(b, handle)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = appendU64s(b, threads, params)
	b = binary.LittleEndian.AppendUint32(b, n)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// AppendLaunchGrid appends LAUNCH_GRID (§6.10, ABI 1.3) on stream 0: guest
// module kernel on grid blocks of block threads with shared bytes of
// dynamic shared memory and the n-byte parameter buffer at graphics
// address params.
func AppendLaunchGrid(b []byte, kernel uint32, grid, block [3]uint32, shared uint32, params uint64, n uint32) []byte {
	b = AppendHeader(b, abi.OpLaunchGrid, 0, abi.CmdLaunchGridSize)
	for _, v := range []uint32{kernel, shared, grid[0], grid[1], grid[2], block[0], block[1], block[2]} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	b = binary.LittleEndian.AppendUint64(b, params)
	b = binary.LittleEndian.AppendUint32(b, n)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// SaxpyArgs are the LAUNCH arguments of a SAXPY kernel (§7.1).
func SaxpyArgs(n uint64, a float32, x, y uint64) []uint64 {
	return []uint64{n, uint64(math.Float32bits(a)), x, y}
}

// StencilArgs are the LAUNCH arguments of a STENCIL kernel (§7.2).
func StencilArgs(w, h uint32, in, out uint64) []uint64 {
	return []uint64{uint64(w), uint64(h), in, out}
}

// RenderArgs are the LAUNCH arguments of a RENDER kernel (§7.3).
func RenderArgs(w, h uint32, fb, frame uint64) []uint64 {
	return []uint64{uint64(w), uint64(h), fb, frame}
}

func appendU64s(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}
