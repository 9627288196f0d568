package engine

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// allCommands has one valid command of every opcode (and both DMA
// directions and fence flags).
var allCommands = []Command{
	Nop{Bytes: 8},
	Nop{Bytes: 256},
	Copy{Dst: 0x1000, Src: 0x2000, Len: 0x30},
	Fill{Dst: 0x1000, Len: 64, Pattern: 0xdeadbeef},
	DMA{ToGfx: true, GA: 0x3000, GPA: 0x10, Len: 100},
	DMA{ToGfx: false, GA: 0x3000, GPA: 0x10, Len: 100},
	Fence{Value: 42, Addr: 0x4000, Interrupt: true, WriteMem: true},
	Fence{Value: 43},
	KernelLoad{Handle: 7, Kind: abi.KernelSaxpy},
	KernelUnload{Handle: 7},
	Launch{Handle: 7, Args: []uint64{1, 2, 3, 4}},
	Launch{Handle: 9, Args: []uint64{}},
	Launch{Handle: 9, Args: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
	KernelLoadModule{Handle: 11, Args: 3, Image: 0x5000, Len: 1234},
	LaunchParams{Handle: 11, Threads: 1 << 20, Params: 0x6000, Len: 40},
	LaunchGrid{Handle: 12, Grid: Grid{X: 1 << 30, Y: 2, Z: 3, BlockX: 16, BlockY: 8, BlockZ: 4, SharedBytes: 4096}, Params: 0x7000, Len: 28},
}

func TestDecodeValid(t *testing.T) {
	for _, c := range allCommands {
		b := encode(c)
		if uint32(len(b)) != c.Size() {
			t.Errorf("%#v: encoded %d bytes, Size %d", c, len(b), c.Size())
		}
		got, err := Decode(append(b, 0xff, 0xff)) // trailing bytes are ignored
		if err != nil {
			t.Errorf("%#v: %v", c, err)
			continue
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("decoded %#v, want %#v", got, c)
		}
		if got.Opcode() != le.Uint16(b) {
			t.Errorf("%#v: Opcode %d, header %d", c, got.Opcode(), le.Uint16(b))
		}
	}
}

// header builds a raw command: header fields then payload (zero-padded to size
// when size is at least 8).
func header(op, flags uint16, size uint32, payload ...byte) []byte {
	b := make([]byte, max(8, int(size)))
	le.PutUint16(b[0:], op)
	le.PutUint16(b[2:], flags)
	le.PutUint32(b[4:], size)
	copy(b[8:], payload)
	return b
}

func launchRaw(n uint32, size uint32) []byte {
	b := header(abi.OpLaunch, 0, size)
	le.PutUint32(b[8:], 1)
	le.PutUint32(b[12:], n)
	return b
}

func TestDecodeMalformed(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
	}{
		{"unknown opcode", header(abi.NumOps, 0, 8)},
		{"unknown opcode high", header(0xffff, 0, 32)},
		{"size 0", header(abi.OpNop, 0, 0)},
		{"size 4", header(abi.OpNop, 0, 4)},
		{"size not multiple of 8", header(abi.OpNop, 0, 12)},
		{"size over 256", header(abi.OpNop, 0, 264)},
		{"copy size 24", header(abi.OpCopy, 0, 24)},
		{"copy size 40", header(abi.OpCopy, 0, 40)},
		{"fill size 24", header(abi.OpFill, 0, 24)},
		{"dma size 16", header(abi.OpDMAToGfx, 0, 16)},
		{"dma from size 40", header(abi.OpDMAFromGfx, 0, 40)},
		{"fence size 32", header(abi.OpFence, 0, 32)},
		{"kernel load size 8", header(abi.OpKernelLoad, 0, 8)},
		{"kernel unload size 24", header(abi.OpKernelUnload, 0, 24)},
		{"launch size 8", header(abi.OpLaunch, 0, 8)},
		{"launch grid size 48", header(abi.OpLaunchGrid, 0, 48)},
		{"launch grid size 64", header(abi.OpLaunchGrid, 0, 64)},
		{"launch grid flags", header(abi.OpLaunchGrid, 1, 56)},
		{"nop flags", header(abi.OpNop, 1, 8)},
		{"copy flags", header(abi.OpCopy, 0x8000, 32)},
		{"fence reserved flag", header(abi.OpFence, 4, 24)},
		{"launch 9 args", launchRaw(9, 16+72)},
		{"launch huge n", launchRaw(0xffffffff, 16)},
		{"launch size says 2 args, n 1", launchRaw(1, 32)},
		{"launch size says 0 args, n 1", launchRaw(1, 16)},
	}
	for _, tt := range tests {
		_, err := Decode(tt.b)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", tt.name, err)
		}
	}
}

func TestDecodeShort(t *testing.T) {
	for _, c := range allCommands {
		b := encode(c)
		for n := 0; n < len(b); n++ {
			if _, err := Decode(b[:n]); !errors.Is(err, ErrShort) {
				t.Errorf("%#v cut at %d: err %v, want ErrShort", c, n, err)
			}
		}
	}
	// A framing error the header shows is reported even when short.
	if _, err := Decode(header(abi.OpCopy, 0, 40)[:8]); !errors.Is(err, ErrMalformed) {
		t.Errorf("short bad header: %v, want ErrMalformed", err)
	}
}

func TestEncodeInvalid(t *testing.T) {
	for _, c := range []Command{
		Nop{Bytes: 12},
		Nop{Bytes: 264},
		Launch{Handle: 1, Args: make([]uint64, 9)},
	} {
		if _, err := Decode(encode(c)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%#v: err %v, want ErrMalformed", c, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range allCommands {
		f.Add(encode(c))
	}
	f.Add(header(abi.OpFence, 7, 24))
	f.Add(launchRaw(9, 88))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrShort) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrShort", err)
			}
			return
		}
		size := le.Uint32(b[4:])
		if c.Size() != size || c.Opcode() != le.Uint16(b) {
			t.Fatalf("%#v: Size %d Opcode %d, header says %d %d", c, c.Size(), c.Opcode(), size, le.Uint16(b))
		}
		enc := encode(c)
		if uint32(len(enc)) != size {
			t.Fatalf("%#v: encoded %d bytes, want %d", c, len(enc), size)
		}
		c2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decoding %#v: %v", c, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip %#v became %#v", c, c2)
		}
	})
}
