package engine

import (
	"fmt"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// encode encodes c with the guest driver's command encoders, the one
// encoder of the ring format: the engine only decodes. Like them, it does
// not validate (a Nop of odd size encodes as such and Decode refuses it).
func encode(c Command) []byte {
	switch c := c.(type) {
	case Nop:
		return guest.AppendNop(nil, c.Size())
	case Copy:
		return guest.AppendCopy(nil, c.Dst, c.Src, c.Len)
	case Fill:
		return guest.AppendFill(nil, c.Dst, c.Len, c.Pattern)
	case DMA:
		if c.ToGfx {
			return guest.AppendDMAToGfx(nil, c.GA, c.GPA, c.Len)
		}
		return guest.AppendDMAFromGfx(nil, c.GA, c.GPA, c.Len)
	case Fence:
		var f uint16
		if c.Interrupt {
			f |= abi.FenceInterrupt
		}
		if c.WriteMem {
			f |= abi.FenceWriteMem
		}
		return guest.AppendFence(nil, f, c.Value, c.Addr)
	case KernelLoad:
		return guest.AppendKernelLoad(nil, c.Handle, c.Kind)
	case KernelUnload:
		return guest.AppendKernelUnload(nil, c.Handle)
	case Launch:
		return guest.AppendLaunch(nil, c.Handle, c.Args...)
	case KernelLoadModule:
		return guest.AppendKernelLoadModule(nil, c.Handle, c.Args, c.Image, c.Len)
	case LaunchParams:
		return guest.AppendLaunchParams(nil, c.Handle, c.Threads, c.Params, c.Len)
	case LaunchGrid:
		g := c.Grid
		return guest.AppendLaunchGrid(nil, c.Handle, [3]uint32{g.X, g.Y, g.Z}, [3]uint32{g.BlockX, g.BlockY, g.BlockZ}, g.SharedBytes, c.Params, c.Len)
	}
	panic(fmt.Sprintf("engine: encode of %T", c))
}
