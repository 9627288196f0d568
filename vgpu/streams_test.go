package vgpu_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestStreamsErrorsAndFences: on the CUDA-shaped device (local memory and
// streams), a page fault on stream 1 sets stream 1's error to
// CUDA_ERROR_ILLEGAL_ADDRESS and skips its later commands but its fence,
// while stream 2 runs on and reports success with its own last fence;
// clearing the error lets stream 1 run again; the streams' state survives
// Save and Restore onto another vGPU.
func TestStreamsErrorsAndFences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := migtest.NewPool(t, 8*localMem)
	v := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "st", MemSize: localMem, GTTEntries: 1024, LocalMemSize: localSize})
	d := migtest.Attach(t, migtest.Serve(t, v), 1, sim.Options{}).Driver()
	if !d.Streams() {
		t.Fatalf("CAPS %#x: no streams", d.Caps())
	}
	buf, err := d.AllocLocal(2 * abi.PageSize)
	must(t, err)
	unmapped := uint64(d.GTTEntries()-1) << abi.PageShift // never mapped

	must(t, d.SetStream(1))
	must(t, d.Fill(unmapped, 64, 1)) // faults
	must(t, d.Fill(buf, 64, 0x11111111))
	f1 := d.Fence(0)
	must(t, d.SetStream(2))
	must(t, d.Fill(buf+abi.PageSize, 64, 0x22222222))
	f2 := d.Fence(0)

	var se *guest.StreamError
	if err := d.WaitStream(ctx, 1, f1); !errors.As(err, &se) || se.Stream != 1 || se.Code != abi.CudaErrorIllegalAddress {
		t.Fatalf("WaitStream(1) = %v, want stream 1's CUDA_ERROR_ILLEGAL_ADDRESS", err)
	}
	must(t, d.WaitStream(ctx, 2, f2))
	if code, fence, err := d.StreamStatus(2); code != 0 || fence != f2 || err != nil {
		t.Errorf("stream 2: code %d fence %d (%v), want 0 and %d", code, fence, err, f2)
	}
	if _, fence, _ := d.StreamStatus(1); fence != f1 {
		t.Errorf("stream 1's fence %d, want %d: a failed stream's fence still retires", fence, f1)
	}
	loc := v.LocalMemory()
	if !bytes.Equal(loc[:64], make([]byte, 64)) {
		t.Error("a command after stream 1's failure ran")
	}
	if !bytes.Equal(loc[abi.PageSize:abi.PageSize+4], []byte{0x22, 0x22, 0x22, 0x22}) {
		t.Error("stream 2's FILL did not run")
	}

	// The state crosses Save/Restore (a migration's DeviceState).
	v.Quiesce()
	st, err := v.Save()
	must(t, err)
	v.Resume()
	w := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "st2", MemSize: localMem, GTTEntries: 1024, LocalMemSize: localSize})
	w.Quiesce()
	must(t, w.Restore(st))
	if code, fence := w.Engine().Stream(1); code != abi.CudaErrorIllegalAddress || fence != f1 {
		t.Errorf("restored stream 1: code %d fence %d", code, fence)
	}

	must(t, d.ClearStreamError(1))
	must(t, d.SetStream(1))
	must(t, d.Fill(buf, 64, 0x33333333))
	must(t, d.WaitStream(ctx, 1, d.Fence(0)))
	if loc[0] != 0x33 {
		t.Error("stream 1 did not run again after its error was cleared")
	}
	// ERR_STATUS still reports the fault, device-wide, as in ABI 1.1.
	var de *guest.DeviceError
	if err := d.CheckErrors(); !errors.As(err, &de) || de.Status&abi.ErrPageFault == 0 {
		t.Errorf("ERR_STATUS: %v, want the page fault", err)
	}
}

// TestNoStreamsIsTodaysDevice: without local memory the device has no
// streams: CAPS bit 5 clear, SetStream(1) refused, a command with stream
// bits is a framing error as any reserved flag bit was, and the stream
// registers read 0 and ignore writes.
func TestNoStreamsIsTodaysDevice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := migtest.NewPool(t, 4*localMem)
	v := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "plain", MemSize: localMem, GTTEntries: 1024})
	m := migtest.Attach(t, migtest.Serve(t, v), 1, sim.Options{})
	d, bus := m.Driver(), m.Bus()
	if d.Streams() || d.Caps()&abi.CapStreams != 0 {
		t.Fatalf("CAPS %#x announces streams", d.Caps())
	}
	if err := d.SetStream(1); !errors.Is(err, guest.ErrNoStreams) {
		t.Errorf("SetStream(1) = %v, want ErrNoStreams", err)
	}
	ga, err := d.Alloc(abi.PageSize)
	must(t, err)
	cmd := guest.AppendFill(nil, ga, 64, 0x44444444)
	cmd[3] = 1 // flags bit 8: stream 1
	must(t, d.Submit(cmd))
	var de *guest.DeviceError
	if err := d.Wait(ctx, d.Fence(0)); !errors.As(err, &de) || de.Status&abi.ErrCommand == 0 {
		t.Errorf("FILL with stream bits: %v, want ERR_STATUS.COMMAND", err)
	}
	must(t, bus.WriteReg32(abi.RegStreamErr+4, 5))
	for _, off := range []uint32{abi.RegStreamErr, abi.RegStreamErr + 4} {
		if n, err := bus.ReadReg32(off); n != 0 || err != nil {
			t.Errorf("register %#x = %#x, %v; want 0", off, n, err)
		}
	}
	if n, err := bus.ReadReg64(abi.RegStreamFence + 8); n != 0 || err != nil {
		t.Errorf("STREAM_FENCE[1] = %#x, %v; want 0", n, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
