package precopy

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// TestLocalWritesByDeviceAddressMigrate: commands that write device-local
// memory through device addresses (ABI 1.3, no GTT entry involved) after
// the pre-copy — COPY, FILL, DMA_TO_GFX, FENCE's memory write — are
// engine-marked like writes through the GTT: the stop phase sends exactly
// the five local pages they touched and the destination's memory equals
// the source's byte for byte.
func TestLocalWritesByDeviceAddressMigrate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := localVGPU(t, "src", 0), localVGPU(t, "dst", localGfx)
	vm, ga := localGuest(ctx, t, src)
	d := vm.Driver()
	base, err := d.Bus().ReadReg64(abi.RegDeviceAddrBase)
	must(t, err)
	off, ok := d.LocalOffset(ga)
	if base == 0 || !ok {
		t.Fatalf("DEVICE_ADDR_BASE %#x, local offset of %#x known %v", base, ga, ok)
	}
	dev := base + off // the guest's local allocation by device address

	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst.V, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
	must(t, err)
	defer s.Close()
	must(t, s.Precopy(ctx))
	gpa, ram, err := vm.Bus().DMA().Alloc(stream.PageSize)
	must(t, err)
	copy(ram, bytes.Repeat([]byte("device"), 600))
	const pg = stream.PageSize
	must(t, d.Copy(dev+20*pg, dev, 2*pg))                           // local pages 20, 21
	must(t, d.Fill(dev+25*pg+64, 128, 0x11223344))                  // local page 25
	must(t, d.DMAToGfx(dev+30*pg+pg/2, gpa, 16))                    // local page 30
	must(t, d.Wait(ctx, d.FenceAt(abi.FenceWriteMem, dev+31*pg+8))) // local page 31
	rep, err := s.Stop(ctx)
	must(t, err)
	r := <-recv
	must(t, r.err)
	if rep.Stop.LocalPages != 5 || r.rep.Stop.LocalPages != 5 {
		t.Errorf("local pages sent at the stop: source %d, destination %d; want exactly 5", rep.Stop.LocalPages, r.rep.Stop.LocalPages)
	}
	if !bytes.Equal(src.V.LocalMemory(), dst.V.LocalMemory()) || !bytes.Equal(src.V.Memory(), dst.V.Memory()) {
		t.Fatal("destination memory differs from the source's")
	}
	if bytes.Equal(src.V.LocalMemory()[30*pg+pg/2:][:16], make([]byte, 16)) {
		t.Fatal("the DMA through a device address wrote nothing")
	}
}
