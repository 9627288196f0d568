package vgpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vfio"
)

// Operations of FuzzDevice's input: one kind byte, then its arguments.
const (
	fzReg32    = iota // u16 register index (offset/4), u32 value
	fzReg64           // u16 register index (offset/8), u64 value
	fzGTT             // u16 GTT index, u64 entry
	fzRawBAR0         // u32 offset, u8 flags (bit 7 read, bits 0-4 length), data
	fzConfig          // u8 offset, u8 length (1-4), data
	fzAperture        // u32 offset, u8 length, data
	fzReset           // DEVICE_RESET
	fzIdle            // wait for the engine
	fzKinds
)

// fzOp encodes one FuzzDevice operation (seeds).
func fzOp(kind byte, args ...any) []byte {
	b := []byte{kind}
	for _, a := range args {
		switch a := a.(type) {
		case uint8:
			b = append(b, a)
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, a)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, a)
		case uint64:
			b = binary.LittleEndian.AppendUint64(b, a)
		case []byte:
			b = append(b, a...)
		}
	}
	return b
}

// fzRingSetup is a guest bring-up: GTT entries 0-3 onto aperture pages
// 0-3, a 4 KiB ring at graphics address 0, ring enabled, interrupts
// unmasked.
func fzRingSetup() []byte {
	var b []byte
	for i := range 4 {
		b = append(b, fzOp(fzGTT, uint16(i), uint64(i)<<abi.PageShift|abi.GTTValid|abi.GTTWritable)...)
	}
	b = append(b, fzOp(fzReg64, uint16(abi.RegRingBase/8), uint64(0))...)
	b = append(b, fzOp(fzReg32, uint16(abi.RegRingSize/4), uint32(abi.RingMinSize))...)
	b = append(b, fzOp(fzReg32, uint16(abi.RegControl/4), uint32(abi.ControlEnable))...)
	return append(b, fzOp(fzReg32, uint16(abi.RegIntMask/4), uint32(abi.IntFence|abi.IntError))...)
}

// fzCommands puts cmds in the ring at offset 0 and rings the doorbell.
func fzCommands(cmds ...[]byte) []byte {
	ring := bytes.Join(cmds, nil)
	b := fzOp(fzAperture, uint32(0), uint8(len(ring)), ring)
	return append(b, fzOp(fzReg32, uint16(abi.RegDoorbell/4), uint32(len(ring)))...)
}

func fzCmd(op uint16, flags uint16, args ...uint64) []byte {
	b := binary.LittleEndian.AppendUint16(nil, op)
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(8+8*len(args)))
	for _, a := range args {
		b = binary.LittleEndian.AppendUint64(b, a)
	}
	return b
}

// FuzzDevice drives a vGPU with arbitrary sequences of what a guest or a
// vfio-user client can do — BAR0 register and GTT writes, accesses of any
// width and offset, config-space writes, aperture stores (commands the
// fuzzer writes and runs through the doorbell), device resets — and checks
// that nothing panics or hangs; that accesses outside a region are
// refused; that a neighbour vGPU's memory never changes; and that the
// vGPU can always be migrated: SaveMigrated succeeds (the API log agrees
// with the device), and the state restored onto a vGPU in another
// partition, log replayed, saves back to the same state.
func FuzzDevice(f *testing.F) {
	f.Add(fzRingSetup())
	f.Add(append(fzRingSetup(), fzCommands(
		fzCmd(abi.OpFill, 0, 0x1000, 64, 0xabcd),
		fzCmd(abi.OpKernelLoad, 0, uint64(abi.KernelSaxpy)<<32|7),
		fzCmd(abi.OpFence, abi.FenceInterrupt|abi.FenceWriteMem, 5, 0x2000),
	)...))
	f.Add(append(fzRingSetup(), append(fzCommands(fzCmd(abi.OpCopy, 0, 0x1000, 0x1008, 0x3000)), fzOp(fzReset)...)...))
	f.Add(fzOp(fzRawBAR0, uint32(abi.RegRingBase+2), uint8(3), []byte{1, 2, 3}))
	f.Add(fzOp(fzRawBAR0, uint32(abi.GTTOffset+4), uint8(0x80|12)))
	f.Add(fzOp(fzConfig, uint8(0x10), uint8(4), []byte{0xff, 0xff, 0xff, 0xff}))
	f.Add(fzOp(fzGTT, uint16(2000), ^uint64(0)))
	f.Add(fzOp(fzAperture, uint32(1<<20-4), uint8(8), []byte{1, 2, 3, 4, 5, 6, 7, 8}))

	p, err := pool.New(8 << 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.Close() })
	neighbour, err := New(Config{Name: "neighbour", MemSize: 1 << 20, GTTEntries: 1024}, p, zerolog.Nop())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { neighbour.Close() })
	fill := bytes.Repeat([]byte{0xa5}, 1<<20)
	copy(neighbour.Memory(), fill)

	f.Fuzz(func(t *testing.T, ops []byte) {
		v := newVGPU(t, p, "fuzz", 1<<20)
		for len(ops) > 0 {
			ops = fzApply(t, v, ops)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := v.eng.WaitIdle(ctx); err != nil {
			t.Fatalf("engine never went idle: %v (%+v)", err, v.eng.Regs())
		}
		if !bytes.Equal(neighbour.Memory(), fill) {
			t.Fatal("the neighbour vGPU's memory changed")
		}
		v.Quiesce()
		m, err := v.SaveMigrated()
		if err != nil {
			t.Fatalf("SaveMigrated: %v", err)
		}
		want, err := v.Save()
		if err != nil {
			t.Fatal(err)
		}
		w := newVGPU(t, p, "restored", 1<<20)
		w.Quiesce()
		if err := ApplyLog(&m.State, m.Device); err != nil {
			t.Fatalf("ApplyLog: %v", err)
		}
		if err := w.RestoreMigrated(m); err != nil {
			t.Fatalf("RestoreMigrated: %v", err)
		}
		got, err := w.Save()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normState(got), normState(want)) {
			t.Fatalf("restored state differs:\n got %+v\nwant %+v", got, want)
		}
	})
}

// normState makes empty and nil slices compare equal.
func normState(s State) State {
	if len(s.Engine.Kernels) == 0 {
		s.Engine.Kernels = nil
	}
	if len(s.Engine.Modules) == 0 {
		s.Engine.Modules = nil
	}
	return s
}

// fzApply applies the first operation of ops to v and returns the rest.
func fzApply(t *testing.T, v *VGPU, ops []byte) []byte {
	kind, ops := ops[0]%fzKinds, ops[1:]
	take := func(n int) []byte {
		b := make([]byte, n)
		ops = ops[copy(b, ops):]
		return b
	}
	le := binary.LittleEndian
	switch kind {
	case fzReg32:
		off := uint64(le.Uint16(take(2))) * 4 % abi.BAR0Size
		_ = v.WriteRegion(abi.BARRegs, off, take(4))
	case fzReg64:
		off := uint64(le.Uint16(take(2))) * 8 % abi.BAR0Size
		_ = v.WriteRegion(abi.BARRegs, off, take(8))
	case fzGTT:
		off := abi.GTTOffset + uint64(le.Uint16(take(2)))*abi.GTTEntrySize
		_ = v.WriteRegion(abi.BARRegs, off, take(8))
	case fzRawBAR0:
		off := uint64(le.Uint32(take(4)))
		fl := take(1)[0]
		n := int(fl & 0x1f)
		if fl&0x80 != 0 {
			p := make([]byte, n)
			err := v.ReadRegion(abi.BARRegs, off, p)
			checkRefused(t, "BAR0 read", off, n, abi.BAR0Size, err)
		} else {
			err := v.WriteRegion(abi.BARRegs, off, take(n))
			checkRefused(t, "BAR0 write", off, n, abi.BAR0Size, err)
		}
	case fzConfig:
		off, n := uint64(take(1)[0]), int(take(1)[0]%5)
		err := v.WriteRegion(vfio.PCIConfigRegionIndex, off, take(n))
		checkRefused(t, "config write", off, n, configSpaceSize, err)
	case fzAperture:
		off, n := uint64(le.Uint32(take(4))), int(take(1)[0])
		err := v.WriteRegion(abi.BARAperture, off, take(n))
		checkRefused(t, "aperture write", off, n, v.cfg.MemSize, err)
	case fzReset:
		if err := v.Reset(); err != nil {
			t.Fatalf("reset: %v", err)
		}
	case fzIdle:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := v.eng.WaitIdle(ctx); err != nil {
			t.Fatalf("engine never went idle: %v", err)
		}
	}
	return ops
}

// checkRefused fails the test if an access outside a region of size bytes
// was not refused.
func checkRefused(t *testing.T, what string, off uint64, n int, size uint64, err error) {
	t.Helper()
	if outside := n == 0 || off >= size || uint64(n) > size-off; outside && err == nil {
		t.Fatalf("%s of %d bytes at %#x (region of %#x) was not refused", what, n, off, size)
	}
}
