package precopy

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
)

// FuzzDeviceState feeds arbitrary DeviceState and APILog section payloads
// to what a destination does with them (restore): gob-decode the state,
// decode and replay the log, restore onto an arriving vGPU. Whatever is
// accepted must be a device that runs: the work the state says is pending
// runs once the engine resumes, reaches no memory but the vGPU's own (a
// neighbour's memory stays as it was), and the engine goes idle.
func FuzzDeviceState(f *testing.F) {
	p, err := pool.New(8 << 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.Close() })
	newV := func(tb testing.TB, name string) *vgpu.VGPU {
		v, err := vgpu.New(vgpu.Config{Name: name, MemSize: 1 << 20, GTTEntries: 256}, p, zerolog.Nop())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { v.Close() })
		return v
	}
	neighbour := newV(f, "neighbour")
	fill := bytes.Repeat([]byte{0xa5}, 1<<20)
	copy(neighbour.Memory(), fill)

	for _, pending := range []bool{false, true} {
		st, dev, fe := seedState(f, newV(f, "seed"), pending)
		f.Add(st, dev, fe)
	}
	f.Add([]byte{}, apilog.Encode(nil), apilog.Encode(nil))

	f.Fuzz(func(t *testing.T, state, devLog, frontEnd []byte) {
		d := &dest{v: newV(t, "arrived"), state: state, devLog: devLog, frontEnd: frontEnd}
		d.v.Quiesce()
		if err := d.restore(); err != nil {
			return
		}
		d.v.Resume()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.v.Engine().WaitIdle(ctx); err != nil {
			t.Fatalf("a restored state's pending work never finished: %v", err)
		}
		if !bytes.Equal(neighbour.Memory(), fill) {
			t.Fatal("a restored vGPU wrote its neighbour's memory")
		}
		d.v.Quiesce()
		if _, err := d.v.SaveMigrated(); err != nil {
			t.Fatalf("a restored vGPU cannot migrate again: %v", err)
		}
	})
}

// seedState drives v through a ring with a FILL, a kernel load and a
// fence (and, with pending, a doorbell the quiesced engine has not run)
// and returns its migration sections as a source sends them.
func seedState(tb testing.TB, v *vgpu.VGPU, pending bool) (state, devLog, frontEnd []byte) {
	le := binary.LittleEndian
	w := func(off uint64, b []byte) {
		if err := v.WriteRegion(abi.BARRegs, off, b); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range uint64(4) {
		w(abi.GTTOffset+8*i, le.AppendUint64(nil, i<<abi.PageShift|abi.GTTValid|abi.GTTWritable))
	}
	w(abi.RegRingSize, le.AppendUint32(nil, abi.RingMinSize))
	w(abi.RegControl, le.AppendUint32(nil, abi.ControlEnable))
	w(abi.RegIntMask, le.AppendUint32(nil, abi.IntFence|abi.IntError))
	cmd := func(op uint16, flags uint16, args ...uint64) []byte {
		b := le.AppendUint16(nil, op)
		b = le.AppendUint16(b, flags)
		b = le.AppendUint32(b, uint32(8+8*len(args)))
		for _, a := range args {
			b = le.AppendUint64(b, a)
		}
		return b
	}
	ring := bytes.Join([][]byte{
		cmd(abi.OpFill, 0, 0x1000, 64, 0xabcd),
		cmd(abi.OpKernelLoad, 0, uint64(abi.KernelRender)<<32|3),
		cmd(abi.OpFence, abi.FenceInterrupt|abi.FenceWriteMem, 5, 0x2000),
	}, nil)
	copy(v.Memory(), ring)
	if pending {
		v.Quiesce()
	}
	w(abi.RegDoorbell, le.AppendUint32(nil, uint32(len(ring))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !pending {
		if err := v.Engine().WaitIdle(ctx); err != nil {
			tb.Fatal(err)
		}
		v.Quiesce()
	}
	m, err := v.SaveMigrated()
	if err != nil {
		tb.Fatal(err)
	}
	if state, err = encodeState(m.State); err != nil {
		tb.Fatal(err)
	}
	return state, apilog.Encode(m.Device), apilog.Encode(m.FrontEnd)
}
