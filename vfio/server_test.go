package vfio

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestClientServerInfo(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	info, err := c.DeviceInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info != ts.dev.Info() {
		t.Fatalf("device info %+v", info)
	}
	irq, err := c.IRQInfo(PCIINTxIRQIndex)
	if err != nil || irq.Count != 1 || irq.Flags&IRQInfoFlagAutomasked == 0 {
		t.Fatalf("irq info %+v, %v", irq, err)
	}
	if _, err := c.IRQInfo(99); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("irq info 99: %v, want EINVAL", err)
	}
	ri, err := c.RegionInfo(fakeRegsIndex)
	if err != nil || ri.Size != fakeRegsSize || ri.File != nil || ri.Flags&RegionFlagMmap != 0 {
		t.Fatalf("BAR0 info %+v, %v", ri, err)
	}
	if _, err := c.RegionInfo(42); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("region 42: %v, want EINVAL", err)
	}
}

func TestRegionReadWrite(t *testing.T) {
	ts := startServer(t, 4096) // small transfers to exercise splitting
	c := dial(t, ts.path)
	if got := c.MaxDataXfer(); got != 4096 {
		t.Fatalf("negotiated max_data_xfer_size %d", got)
	}
	if err := c.WriteRegion(fakeRegsIndex, 0x10, ne.AppendUint32(nil, 0xdeadbeef)); err != nil {
		t.Fatal(err)
	}
	if got := ts.dev.reg32(0x10); got != 0xdeadbeef {
		t.Fatalf("register holds %#x", got)
	}
	// Posted writes are seen by the next request.
	if err := c.PostWriteRegion(fakeRegsIndex, 0x20, ne.AppendUint32(nil, 0x1234)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if err := c.ReadRegion(fakeRegsIndex, 0x20, buf); err != nil || ne.Uint32(buf) != 0x1234 {
		t.Fatalf("read after posted write: %x, %v", buf, err)
	}
	// A posted write that fails gets no reply; the connection goes on.
	if err := c.PostWriteRegion(fakeRegsIndex, fakeRegsSize, buf); err != nil {
		t.Fatal(err)
	}
	// Large accesses are split by the client.
	big := bytes.Repeat([]byte("0123456789abcdef"), fakeApertureSz/16)
	if err := c.WriteRegion(fakeApertureIdx, 0, big); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(big))
	if err := c.ReadRegion(fakeApertureIdx, 0, back); err != nil || !bytes.Equal(back, big) {
		t.Fatalf("large read back: %v", err)
	}
	if err := c.ReadRegion(fakeRegsIndex, fakeRegsSize-2, buf); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("read past region: %v, want EINVAL", err)
	}
	// Write multi.
	err := c.WriteRegionMulti([]RegionWrite{
		{Region: fakeRegsIndex, Offset: 0x100, Data: []byte{1, 2, 3, 4}},
		{Region: PCIConfigRegionIndex, Offset: 0x4, Data: []byte{7, 0}},
		{Region: fakeRegsIndex, Offset: 0x108, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ts.dev.reg32(0x100); got != 0x04030201 {
		t.Fatalf("write multi register %#x", got)
	}
	cfg := make([]byte, 2)
	if err := c.ReadRegion(PCIConfigRegionIndex, 4, cfg); err != nil || cfg[0] != 7 {
		t.Fatalf("config command %v, %v", cfg, err)
	}
	if err := c.WriteRegionMulti([]RegionWrite{{Region: 55, Offset: 0, Data: []byte{1}}}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("write multi to bad region: %v, want EINVAL", err)
	}
	if err := c.Reset(); err != nil || ts.dev.resetCount() != 1 {
		t.Fatalf("reset: %v, %d resets", err, ts.dev.resetCount())
	}
}

// TestRegionMmap maps the aperture from the descriptor the server passed
// and sees the device's bytes both ways.
func TestRegionMmap(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	if _, err := ts.dev.aperture.WriteAt([]byte("aperture!"), 0x2000); err != nil {
		t.Fatal(err)
	}
	ri, err := c.RegionInfo(fakeApertureIdx)
	if err != nil {
		t.Fatal(err)
	}
	if ri.File == nil || ri.Flags&RegionFlagMmap == 0 || ri.Flags&RegionFlagCaps != 0 || len(ri.Sparse) != 0 {
		t.Fatalf("aperture info %+v", ri)
	}
	defer ri.File.Close()
	mem := mmapFile(t, ri.File, ri.Offset, int(ri.Size))
	if string(mem[0x2000:0x2009]) != "aperture!" {
		t.Fatalf("mapped aperture holds %q", mem[0x2000:0x2009])
	}
	copy(mem[0x3000:], "from guest")
	buf := make([]byte, 10)
	if err := c.ReadRegion(fakeApertureIdx, 0x3000, buf); err != nil || string(buf) != "from guest" {
		t.Fatalf("device sees %q, %v", buf, err)
	}

	// The sparse region: the first request is too small, the client retries.
	ri, err = c.RegionInfo(fakeSparseIdx)
	if err != nil {
		t.Fatal(err)
	}
	defer ri.File.Close()
	if ri.Flags&(RegionFlagMmap|RegionFlagCaps) != RegionFlagMmap|RegionFlagCaps ||
		len(ri.Sparse) != 1 || ri.Sparse[0] != (SparseArea{Offset: 4096, Size: 4096}) {
		t.Fatalf("sparse info %+v", ri)
	}
	mem = mmapFile(t, ri.File, ri.Offset+ri.Sparse[0].Offset, int(ri.Sparse[0].Size))
	copy(mem, "sparse")
	if err := c.ReadRegion(fakeSparseIdx, 4096, buf[:6]); err != nil || string(buf[:6]) != "sparse" {
		t.Fatalf("device sees %q, %v", buf[:6], err)
	}
}

// TestRegionInfoSmallArgsz checks the reply QEMU 11.1 needs to a too-small
// argsz: the needed argsz, no CAPS flag, no capability offset, no fd.
func TestRegionInfoSmallArgsz(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	reply, fds, err := c.Call(CmdDeviceGetRegionInfo, RegionInfoMsg{Argsz: RegionInfoMsgSize, Index: fakeSparseIdx}.Append(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeRegionInfoMsg(reply)
	if err != nil {
		t.Fatal(err)
	}
	want := uint32(RegionInfoMsgSize + CapHeaderSize + SparseMmapCapSize + SparseAreaSize)
	if len(reply) != RegionInfoMsgSize || len(fds) != 0 || m.Argsz != want || m.Flags&RegionFlagCaps != 0 || m.CapOffset != 0 {
		t.Fatalf("small-argsz reply %+v (%d bytes, %d fds), want argsz %d without caps", m, len(reply), len(fds), want)
	}
	reply, fds, err = c.Call(CmdDeviceGetRegionInfo, RegionInfoMsg{Argsz: want, Index: fakeSparseIdx}.Append(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	closeFiles(fds)
	m, _ = DecodeRegionInfoMsg(reply)
	if len(reply) != int(want) || len(fds) != 1 || m.CapOffset != RegionInfoMsgSize || m.Flags&RegionFlagCaps == 0 {
		t.Fatalf("full reply %+v (%d bytes, %d fds)", m, len(reply), len(fds))
	}
}

func mmapFile(t *testing.T, f *os.File, off uint64, size int) []byte {
	t.Helper()
	fd, err := rawFD(f)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, int64(off), size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap region: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

func TestDMAMapOverSocket(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	ram := memfd(t, guestRAM)
	rw := DMAProtRead | DMAProtWrite
	if err := c.MapDMA(DMARegion{IOVA: 0, Size: guestRAM, Prot: rw, File: ram}); err != nil {
		t.Fatal(err)
	}
	if err := c.MapDMA(DMARegion{IOVA: 0xfffc0000, Size: 0x40000, Prot: DMAProtRead}); err != nil {
		t.Fatalf("fd-less map: %v", err)
	}
	if err := c.MapDMA(DMARegion{IOVA: pg, Size: pg, Prot: rw, File: ram}); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("overlapping map: %v, want EEXIST", err)
	}
	if _, err := ram.WriteAt([]byte("guest"), 3*pg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if err := ts.srv.DMA().ReadAt(got, 3*pg); err != nil || string(got) != "guest" {
		t.Fatalf("server reads %q, %v", got, err)
	}
	if err := ts.srv.DMA().WriteAt([]byte("engine"), 4*pg); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 6)
	if _, err := ram.ReadAt(back, 4*pg); err != nil || string(back) != "engine" {
		t.Fatalf("guest RAM holds %q, %v", back, err)
	}
	if err := c.UnmapDMA(0, guestRAM); err != nil {
		t.Fatal(err)
	}
	if err := c.UnmapDMA(0, guestRAM); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("second unmap: %v, want ENOENT", err)
	}
	// QEMU's unmap-all form.
	if _, _, err := c.Call(CmdDMAUnmap, DMAUnmapMsg{Argsz: DMAUnmapMsgSize, Flags: DMAUnmapFlagAll}.Append(nil), nil); err != nil {
		t.Fatal(err)
	}
	if n := len(ts.srv.DMA().Regions()); n != 0 {
		t.Fatalf("%d regions after unmap all", n)
	}
}

func TestSetIRQsOverSocket(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	trigger, unmask := eventfd(t), eventfd(t)
	for i, s := range []IRQSet{
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 1, FDs: []*os.File{trigger}},
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionMask, Count: 1},
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionUnmask, Count: 1, FDs: []*os.File{unmask}},
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionUnmask, Count: 1},
	} {
		if err := c.SetIRQs(s); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	irqs := ts.srv.IRQs()
	irqs.SetINTx(true)
	if n := pollCount(t, trigger); n != 1 {
		t.Fatalf("INTx count %d", n)
	}
	signal(t, unmask)
	if n := waitCount(t, trigger); n != 1 {
		t.Fatalf("INTx after resample: count %d", n)
	}
	irqs.SetINTx(false)

	msi := make([]*os.File, 3)
	for i := range msi {
		msi[i] = eventfd(t)
	}
	msi[1] = nil // de-assigned vector, sent as its own message
	if err := c.SetIRQs(IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 3, FDs: msi}); err != nil {
		t.Fatal(err)
	}
	irqs.SignalMSI(2)
	if n := pollCount(t, msi[2]); n != 1 {
		t.Fatalf("MSI vector 2 count %d", n)
	}
	if err := c.SetIRQs(IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataBool | IRQSetActionTrigger, Count: 1, Bools: []bool{true}}); err != nil {
		t.Fatal(err)
	}
	if n := pollCount(t, msi[0]); n != 1 {
		t.Fatalf("MSI vector 0 after client trigger: count %d", n)
	}
	if err := c.SetIRQs(IRQSet{Index: 9, Flags: IRQSetDataNone | IRQSetActionTrigger, Count: 1}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("bad index: %v, want EINVAL", err)
	}
}

// TestDisconnectReconnect: a client that goes away leaves the device as it
// was, with its DMA unmapped and its eventfds closed; the next client works.
func TestDisconnectReconnect(t *testing.T) {
	ts := startServer(t, 0)
	c1, err := Dial(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	ram := memfd(t, guestRAM)
	if err := c1.MapDMA(DMARegion{IOVA: 0, Size: guestRAM, Prot: DMAProtRead | DMAProtWrite, File: ram}); err != nil {
		t.Fatal(err)
	}
	trigger := eventfd(t)
	if err := c1.SetIRQs(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 1, FDs: []*os.File{trigger}}); err != nil {
		t.Fatal(err)
	}
	if err := c1.WriteRegion(fakeRegsIndex, 0x40, ne.AppendUint32(nil, 0xcafe)); err != nil {
		t.Fatal(err)
	}
	c1.Close()

	// The server takes the next client only after cleaning up the last, so
	// once Dial has negotiated, the cleanup is done.
	c2 := dial(t, ts.path)
	if n := len(ts.srv.DMA().Regions()); n != 0 {
		t.Fatalf("%d DMA regions left after disconnect", n)
	}
	ts.srv.IRQs().SetINTx(true)
	if n := pollCount(t, trigger); n != 0 {
		t.Fatalf("old client's eventfd signalled %d", n)
	}
	ts.srv.IRQs().SetINTx(false)
	buf := make([]byte, 4)
	if err := c2.ReadRegion(fakeRegsIndex, 0x40, buf); err != nil || ne.Uint32(buf) != 0xcafe {
		t.Fatalf("device state after reconnect: %x, %v", buf, err)
	}
	if err := c2.MapDMA(DMARegion{IOVA: 0, Size: guestRAM, Prot: DMAProtRead, File: ram}); err != nil {
		t.Fatalf("remap after reconnect: %v", err)
	}
}

func TestClientConcurrent(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := uint64(g * 8)
			buf := make([]byte, 8)
			for i := range 200 {
				if err := c.WriteRegion(fakeRegsIndex, off, ne.AppendUint64(nil, uint64(i))); err != nil {
					t.Error(err)
					return
				}
				if err := c.ReadRegion(fakeRegsIndex, off, buf); err != nil || ne.Uint64(buf) != uint64(i) {
					t.Errorf("goroutine %d: read %d, %v", g, ne.Uint64(buf), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestClosedClient(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	c.Close()
	if _, err := c.DeviceInfo(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed client: %v, want ErrClosed", err)
	}
}

func TestServeEndsWhenListenerCloses(t *testing.T) {
	path := t.TempDir() + "/s.sock"
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{Device: newFakeDevice(t)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), l) }()
	c := dial(t, path) // served, so Serve is running
	c.Close()
	l.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve after listener close: %v", err)
	}
}
