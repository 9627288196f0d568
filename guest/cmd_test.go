package guest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
)

// TestEncodersDecode checks that every encoder's bytes decode, with the
// engine's decoder, to the fields it was given (these encoders are the
// ring format's only ones: the engine decodes).
func TestEncodersDecode(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want engine.Command
	}{
		{"nop8", AppendNop(nil, 8), engine.Nop{Bytes: 8}},
		{"nop256", AppendNop(nil, 256), engine.Nop{Bytes: 256}},
		{"copy", AppendCopy(nil, 0x1000, 0x2fff, 12345), engine.Copy{Dst: 0x1000, Src: 0x2fff, Len: 12345}},
		{"fill", AppendFill(nil, 0x44, 0x1000, 0xdeadbeef), engine.Fill{Dst: 0x44, Len: 0x1000, Pattern: 0xdeadbeef}},
		{"dma-to", AppendDMAToGfx(nil, 0x3000, 0x7000, 99), engine.DMA{ToGfx: true, GA: 0x3000, GPA: 0x7000, Len: 99}},
		{"dma-from", AppendDMAFromGfx(nil, 0x3000, 0x7000, 99), engine.DMA{GA: 0x3000, GPA: 0x7000, Len: 99}},
		{"fence", AppendFence(nil, abi.FenceInterrupt|abi.FenceWriteMem, 42, 0x88),
			engine.Fence{Value: 42, Addr: 0x88, Interrupt: true, WriteMem: true}},
		{"fence-plain", AppendFence(nil, 0, 7, 0), engine.Fence{Value: 7}},
		{"load", AppendKernelLoad(nil, 9, abi.KernelStencil), engine.KernelLoad{Handle: 9, Kind: abi.KernelStencil}},
		{"unload", AppendKernelUnload(nil, 9), engine.KernelUnload{Handle: 9}},
		{"launch", AppendLaunch(nil, 3, SaxpyArgs(100, 1.5, 0x1000, 0x2000)...),
			engine.Launch{Handle: 3, Args: []uint64{100, 0x3fc00000, 0x1000, 0x2000}}},
		{"launch0", AppendLaunch(nil, 3), engine.Launch{Handle: 3}},
	}
	for _, c := range cases {
		got, err := engine.Decode(c.b)
		if err != nil {
			t.Errorf("%s: Decode: %v", c.name, err)
			continue
		}
		if got.Size() != uint32(len(c.b)) {
			t.Errorf("%s: decoded size %d, encoded %d bytes", c.name, got.Size(), len(c.b))
		}
		if l, ok := got.(engine.Launch); ok && len(l.Args) == 0 {
			l.Args = nil
			got = l
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: decoded %#v, want %#v", c.name, got, c.want)
		}
	}
}

// TestMalformedEncodingsRefused checks that the raw commands the suite uses
// to provoke ERR_STATUS.COMMAND are framing errors for the engine.
func TestMalformedEncodingsRefused(t *testing.T) {
	for name, b := range malformedCommands() {
		if _, err := engine.Decode(b); !errors.Is(err, engine.ErrMalformed) {
			t.Errorf("%s: Decode error %v, want ErrMalformed", name, err)
		}
	}
}
