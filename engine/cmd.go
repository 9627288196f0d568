package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// Decoder errors. Callers branch on them with errors.Is.
var (
	// ErrShort means b holds less than the command's size field asks for; the
	// caller fetches more bytes and decodes again.
	ErrShort = errors.New("engine: command truncated")
	// ErrMalformed is a framing error (docs/device-abi.md §5): unknown opcode,
	// bad size, reserved flag bits, too many launch arguments.
	ErrMalformed = errors.New("engine: malformed command")
)

// Command is one decoded ring command (docs/device-abi.md §6). The concrete
// types are Nop, Copy, Fill, DMA, Fence, KernelLoad, KernelUnload, Launch,
// (ABI 1.1) KernelLoadModule, (ABI 1.2) LaunchParams and (ABI 1.3)
// LaunchGrid.
type Command interface {
	// Opcode is the abi.Op* number of the command.
	Opcode() uint16
	// Size is the encoded size in bytes, header included.
	Size() uint32
}

// Nop is NOP: Bytes bytes of padding, header included (§6).
type Nop struct{ Bytes uint32 }

// Copy is COPY (§6.1): Len bytes from graphics address Src to Dst, memmove.
type Copy struct{ Dst, Src, Len uint64 }

// Fill is FILL (§6.2): Len bytes at Dst filled with Pattern (little-endian).
type Fill struct {
	Dst, Len uint64
	Pattern  uint32
}

// DMA is DMA_TO_GFX (ToGfx) or DMA_FROM_GFX (§6.3): Len bytes between
// guest-physical address GPA and graphics address GA.
type DMA struct {
	ToGfx        bool
	GA, GPA, Len uint64
}

// Fence is FENCE (§6.4).
type Fence struct {
	Value, Addr uint64
	Interrupt   bool // flag abi.FenceInterrupt
	WriteMem    bool // flag abi.FenceWriteMem: write Value at Addr
}

// KernelLoad is KERNEL_LOAD (§6.5).
type KernelLoad struct{ Handle, Kind uint32 }

// KernelLoadModule is KERNEL_LOAD_MODULE (§6.8, ABI 1.1): the image of
// Len bytes at graphics address Image becomes kernel object Handle taking
// Args launch arguments.
type KernelLoadModule struct {
	Handle, Args uint32
	Image        uint64
	Len          uint32
}

// KernelUnload is KERNEL_UNLOAD (§6.6).
type KernelUnload struct{ Handle uint32 }

// LaunchParams is LAUNCH_PARAMS (§6.9, ABI 1.2): guest module Handle on
// Threads threads with the Len-byte parameter buffer at graphics address
// Params.
type LaunchParams struct {
	Handle  uint32
	Threads uint64
	Params  uint64
	Len     uint32
}

// LaunchGrid is LAUNCH_GRID (§6.10, ABI 1.3): guest module Handle on
// Grid with the Len-byte parameter buffer at graphics address Params.
type LaunchGrid struct {
	Handle uint32
	Grid   Grid
	Params uint64
	Len    uint32
}

// Launch is LAUNCH (§6.7).
type Launch struct {
	Handle uint32
	Args   []uint64
}

func (c Nop) Opcode() uint16              { return abi.OpNop }
func (c Copy) Opcode() uint16             { return abi.OpCopy }
func (c Fill) Opcode() uint16             { return abi.OpFill }
func (c Fence) Opcode() uint16            { return abi.OpFence }
func (c KernelLoad) Opcode() uint16       { return abi.OpKernelLoad }
func (c KernelUnload) Opcode() uint16     { return abi.OpKernelUnload }
func (c KernelLoadModule) Opcode() uint16 { return abi.OpKernelLoadModule }
func (c Launch) Opcode() uint16           { return abi.OpLaunch }
func (c LaunchParams) Opcode() uint16     { return abi.OpLaunchParams }
func (c LaunchGrid) Opcode() uint16       { return abi.OpLaunchGrid }
func (c DMA) Opcode() uint16 {
	if c.ToGfx {
		return abi.OpDMAToGfx
	}
	return abi.OpDMAFromGfx
}

func (c Nop) Size() uint32              { return max(c.Bytes, abi.CmdHeaderSize) }
func (c Copy) Size() uint32             { return abi.CmdCopySize }
func (c Fill) Size() uint32             { return abi.CmdFillSize }
func (c DMA) Size() uint32              { return abi.CmdDMASize }
func (c Fence) Size() uint32            { return abi.CmdFenceSize }
func (c KernelLoad) Size() uint32       { return abi.CmdKernelLoadSize }
func (c KernelUnload) Size() uint32     { return abi.CmdKernelUnloadSize }
func (c KernelLoadModule) Size() uint32 { return abi.CmdKernelLoadModuleSize }
func (c Launch) Size() uint32           { return abi.CmdLaunchBaseSize + 8*uint32(len(c.Args)) }
func (c LaunchParams) Size() uint32     { return abi.CmdLaunchParamsSize }
func (c LaunchGrid) Size() uint32       { return abi.CmdLaunchGridSize }

var le = binary.LittleEndian

// opSpec is the framing rule of one opcode (docs/device-abi.md §6): the exact
// size (0: variable, checked by decode), the flag bits allowed, and the
// payload decoder, which sees exactly Size()-CmdHeaderSize bytes.
type opSpec struct {
	size   uint32
	flags  uint16
	decode func(h abi.CmdHeader, p []byte) (Command, error)
}

var opSpecs = [abi.NumOps]opSpec{
	abi.OpNop: {0, 0, func(h abi.CmdHeader, _ []byte) (Command, error) {
		return Nop{Bytes: h.Size}, nil
	}},
	abi.OpCopy: {abi.CmdCopySize, 0, func(_ abi.CmdHeader, p []byte) (Command, error) {
		return Copy{Dst: le.Uint64(p[0:]), Src: le.Uint64(p[8:]), Len: le.Uint64(p[16:])}, nil
	}},
	abi.OpFill: {abi.CmdFillSize, 0, func(_ abi.CmdHeader, p []byte) (Command, error) {
		return Fill{Dst: le.Uint64(p[0:]), Len: le.Uint64(p[8:]), Pattern: le.Uint32(p[16:])}, nil
	}},
	abi.OpDMAToGfx:   {abi.CmdDMASize, 0, decodeDMA(true)},
	abi.OpDMAFromGfx: {abi.CmdDMASize, 0, decodeDMA(false)},
	abi.OpFence: {abi.CmdFenceSize, abi.FenceInterrupt | abi.FenceWriteMem, func(h abi.CmdHeader, p []byte) (Command, error) {
		return Fence{
			Value:     le.Uint64(p[0:]),
			Addr:      le.Uint64(p[8:]),
			Interrupt: h.Flags&abi.FenceInterrupt != 0,
			WriteMem:  h.Flags&abi.FenceWriteMem != 0,
		}, nil
	}},
	abi.OpKernelLoad: {abi.CmdKernelLoadSize, 0, func(_ abi.CmdHeader, p []byte) (Command, error) {
		return KernelLoad{Handle: le.Uint32(p[0:]), Kind: le.Uint32(p[4:])}, nil
	}},
	abi.OpKernelUnload: {abi.CmdKernelUnloadSize, 0, func(_ abi.CmdHeader, p []byte) (Command, error) {
		return KernelUnload{Handle: le.Uint32(p[0:])}, nil
	}},
	abi.OpLaunch: {0, 0, decodeLaunch},
	abi.OpKernelLoadModule: {abi.CmdKernelLoadModuleSize, 0, func(_ abi.CmdHeader, p []byte) (Command, error) {
		return KernelLoadModule{Handle: le.Uint32(p[0:]), Args: le.Uint32(p[4:]), Image: le.Uint64(p[8:]), Len: le.Uint32(p[16:])}, nil
	}},
	abi.OpLaunchParams: {abi.CmdLaunchParamsSize, 0, func(_ abi.CmdHeader, p []byte) (Command, error) {
		return LaunchParams{Handle: le.Uint32(p[0:]), Threads: le.Uint64(p[8:]), Params: le.Uint64(p[16:]), Len: le.Uint32(p[24:])}, nil
	}},
	abi.OpLaunchGrid: {abi.CmdLaunchGridSize, 0, decodeLaunchGrid},
}

func decodeLaunchGrid(_ abi.CmdHeader, p []byte) (Command, error) { return launchGridOf(p), nil }

// launchGridOf decodes abi.CmdLaunchGrid's payload (the pad is ignored).
func launchGridOf(p []byte) LaunchGrid {
	return LaunchGrid{
		Handle: le.Uint32(p[0:]),
		Grid: Grid{
			SharedBytes: le.Uint32(p[4:]),
			X:           le.Uint32(p[8:]), Y: le.Uint32(p[12:]), Z: le.Uint32(p[16:]),
			BlockX: le.Uint32(p[20:]), BlockY: le.Uint32(p[24:]), BlockZ: le.Uint32(p[28:]),
		},
		Params: le.Uint64(p[32:]),
		Len:    le.Uint32(p[40:]),
	}
}

func decodeDMA(toGfx bool) func(abi.CmdHeader, []byte) (Command, error) {
	return func(_ abi.CmdHeader, p []byte) (Command, error) {
		return DMA{ToGfx: toGfx, GA: le.Uint64(p[0:]), GPA: le.Uint64(p[8:]), Len: le.Uint64(p[16:])}, nil
	}
}

func decodeLaunch(h abi.CmdHeader, p []byte) (Command, error) {
	n := le.Uint32(p[4:])
	if n > abi.LaunchMaxArgs {
		return nil, fmt.Errorf("%w: LAUNCH with %d arguments (at most %d)", ErrMalformed, n, abi.LaunchMaxArgs)
	}
	if want := abi.CmdLaunchBaseSize + 8*n; h.Size != want {
		return nil, fmt.Errorf("%w: LAUNCH with %d arguments has size %d, want %d", ErrMalformed, n, h.Size, want)
	}
	c := Launch{Handle: le.Uint32(p[0:]), Args: make([]uint64, n)}
	for i := range c.Args {
		c.Args[i] = le.Uint64(p[8+8*i:])
	}
	return c, nil
}

// DecodeHeader decodes the 8-byte command header at the start of b and checks
// every framing rule that the header alone decides (opcode, size, flags). On a
// framing error it returns the header as read together with a wrapped
// ErrMalformed; if b is shorter than a header it returns a wrapped ErrShort.
func DecodeHeader(b []byte) (abi.CmdHeader, error) {
	if len(b) < abi.CmdHeaderSize {
		return abi.CmdHeader{}, fmt.Errorf("%w: %d bytes, header needs %d", ErrShort, len(b), abi.CmdHeaderSize)
	}
	h := abi.CmdHeader{Opcode: le.Uint16(b[0:]), Flags: le.Uint16(b[2:]), Size: le.Uint32(b[4:])}
	if h.Size < abi.CmdHeaderSize || h.Size > abi.CmdMaxSize || h.Size%abi.CmdAlign != 0 {
		return h, fmt.Errorf("%w: size %d (want a multiple of %d in %d..%d)",
			ErrMalformed, h.Size, abi.CmdAlign, abi.CmdHeaderSize, abi.CmdMaxSize)
	}
	if int(h.Opcode) >= len(opSpecs) {
		return h, fmt.Errorf("%w: unknown opcode %d", ErrMalformed, h.Opcode)
	}
	spec := opSpecs[h.Opcode]
	if spec.size != 0 && h.Size != spec.size {
		return h, fmt.Errorf("%w: opcode %d with size %d, want %d", ErrMalformed, h.Opcode, h.Size, spec.size)
	}
	if h.Opcode == abi.OpLaunch && h.Size < abi.CmdLaunchBaseSize {
		return h, fmt.Errorf("%w: LAUNCH with size %d, want at least %d", ErrMalformed, h.Size, abi.CmdLaunchBaseSize)
	}
	if h.Flags&^spec.flags != 0 {
		return h, fmt.Errorf("%w: opcode %d with reserved flag bits %#x", ErrMalformed, h.Opcode, h.Flags&^spec.flags)
	}
	return h, nil
}

// Decode decodes one command from the start of b (docs/device-abi.md §5–6).
// Bytes past the command's size are ignored. A framing error returns a
// wrapped ErrMalformed; a b shorter than the command returns a wrapped
// ErrShort (after the header's own checks passed). Padding fields are
// ignored.
func Decode(b []byte) (Command, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) < uint64(h.Size) {
		return nil, fmt.Errorf("%w: %d bytes, command needs %d", ErrShort, len(b), h.Size)
	}
	return opSpecs[h.Opcode].decode(h, b[abi.CmdHeaderSize:h.Size])
}
