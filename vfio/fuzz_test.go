package vfio

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

func FuzzDecodeHeader(f *testing.F) {
	f.Add(Header{ID: 1, Command: CmdVersion, Size: 64}.Append(nil))
	f.Add(Header{ID: 0xffff, Command: CmdRegionRead, Size: 32, Flags: FlagTypeReply | FlagError, Error: 22}.Append(nil))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if len(b) < HeaderSize {
			if !errors.Is(err, ErrShort) {
				t.Fatalf("short input: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Append(nil); !bytes.Equal(got, b[:HeaderSize]) {
			t.Fatalf("re-encoded % x from % x", got, b[:HeaderSize])
		}
	})
}

// FuzzDecodePayload feeds each payload decoder (chosen by the first byte),
// the VERSION parser and the client's region capability parser; decoding
// must not panic, and what decodes must re-encode to the same bytes.
func FuzzDecodePayload(f *testing.F) {
	for i, c := range wireCases {
		f.Add(append([]byte{byte(i)}, c.value.Append(nil)...))
	}
	f.Add(append([]byte{byte(len(wireCases))}, encodeVersion(VersionMsg{}, clientCaps)...))
	caps := RegionInfoMsg{Argsz: 64, Flags: RegionFlagCaps, CapOffset: 32}.Append(nil)
	caps = CapHeader{ID: CapIDSparseMmap, Version: 1}.Append(caps)
	caps = SparseMmapCap{NrAreas: 1}.Append(caps)
	caps = SparseArea{Offset: 4096, Size: 4096}.Append(caps)
	f.Add(append([]byte{byte(len(wireCases) + 1)}, caps...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		sel, b := int(b[0]), b[1:]
		switch {
		case sel < len(wireCases):
			c := wireCases[sel]
			v, err := c.decode(b)
			if err != nil {
				if len(b) >= c.size {
					t.Fatalf("%s: %v on %d bytes", c.name, err, len(b))
				}
				return
			}
			if got := v.(interface{ Append([]byte) []byte }).Append(nil); !bytes.Equal(got, b[:c.size]) {
				t.Fatalf("%s: re-encoded % x from % x", c.name, got, b[:c.size])
			}
		case sel == len(wireCases):
			decodeVersion(b)
		case sel == len(wireCases)+1:
			if m, err := DecodeRegionInfoMsg(b); err == nil {
				parseRegionCaps(b, m.CapOffset)
			}
		}
	})
}

// socketPair returns the two ends of a connected UNIX stream socket.
func socketPair(tb testing.TB) (a, b *net.UnixConn) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socketpair: %v", err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			tb.Fatalf("FileConn: %v", err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// serverMessageSeeds are valid requests, for the fuzz corpus.
func serverMessageSeeds() [][]byte {
	msg := func(id, cmd uint16, payload []byte) []byte {
		return append(Header{ID: id, Command: cmd, Size: uint32(HeaderSize + len(payload))}.Append(nil), payload...)
	}
	write := append(RegionAccessMsg{Offset: 8, Region: fakeRegsIndex, Count: 4}.Append(nil), 1, 2, 3, 4)
	multi := append(WriteMultiMsg{WrCnt: 1}.Append(nil), WriteOne{Region: fakeRegsIndex, Count: 2}.Append(nil)...)
	return [][]byte{
		msg(1, CmdVersion, encodeVersion(VersionMsg{}, clientCaps)),
		msg(2, CmdDeviceGetInfo, DeviceInfoMsg{Argsz: DeviceInfoMsgSize}.Append(nil)),
		msg(3, CmdDeviceGetRegionInfo, RegionInfoMsg{Argsz: RegionInfoMsgSize, Index: fakeSparseIdx}.Append(nil)),
		msg(4, CmdDeviceGetRegionInfo, RegionInfoMsg{Argsz: 256, Index: fakeSparseIdx}.Append(nil)),
		msg(5, CmdDeviceGetIRQInfo, IRQInfoMsg{Argsz: IRQInfoMsgSize}.Append(nil)),
		msg(6, CmdRegionRead, RegionAccessMsg{Region: PCIConfigRegionIndex, Count: 64}.Append(nil)),
		msg(7, CmdRegionWrite, write),
		msg(8, CmdDMAMap, DMAMapMsg{Argsz: DMAMapMsgSize, Flags: DMAProtRead, Addr: 0x10000, Size: 0x1000}.Append(nil)),
		msg(9, CmdDMAUnmap, DMAUnmapMsg{Argsz: DMAUnmapMsgSize, Addr: 0x10000, Size: 0x1000}.Append(nil)),
		msg(10, CmdDeviceSetIRQs, IRQSetMsg{Argsz: IRQSetMsgSize, Flags: IRQSetDataNone | IRQSetActionUnmask, Count: 1}.Append(nil)),
		msg(11, CmdDeviceSetIRQs, append(IRQSetMsg{Argsz: IRQSetMsgSize + 1, Flags: IRQSetDataBool | IRQSetActionTrigger, Index: 1, Count: 1}.Append(nil), 1)),
		msg(12, CmdRegionWriteMulti, multi),
		msg(13, CmdDeviceReset, nil),
		msg(14, CmdDeviceFeature, DeviceFeatureMsg{Argsz: 16, Flags: 1<<16 | 1}.Append(nil)),
		msg(15, CmdDeviceFeature, DeviceFeatureMsg{Argsz: 8, Flags: DeviceFeatureProbe | FeatureMigDeviceState}.Append(nil)),
		msg(16, CmdDeviceFeature, DeviceFeatureMsg{Argsz: 16, Flags: DeviceFeatureGet | FeatureMigDataSize}.Append(nil)),
		msg(17, CmdDeviceFeature, migState(MigStatePreCopy)),
		msg(18, CmdMigDataRead, MigDataMsg{Argsz: MigDataSize + 64, Size: 64}.Append(nil)),
		msg(19, CmdDeviceFeature, migState(MigStateStopCopy)),
		msg(20, CmdMigDataRead, MigDataMsg{Argsz: MigDataSize + 4096, Size: 4096}.Append(nil)),
		msg(21, CmdDeviceFeature, migState(MigStateResuming)),
		msg(22, CmdMigDataWrite, append(MigDataMsg{Argsz: MigDataSize + 4, Size: 4}.Append(nil), 1, 2, 3, 4)),
		msg(23, CmdDeviceFeature, migState(MigStateRunning)),
		msg(24, CmdDeviceFeature, DeviceFeatureMsg{Argsz: 16, Flags: DeviceFeatureGet | FeatureMigDeviceState}.Append(nil)),
		msg(25, CmdDeviceFeature, dmaLogStart(DMALoggingRange{IOVA: 0x10000, Length: 0x1000})),
		msg(26, CmdDeviceFeature, DMALoggingReport{IOVA: 0x10000, Length: 0x1000, PageSize: 4096}.Append(
			DeviceFeatureMsg{Argsz: DeviceFeatureSize + DMALoggingReportSize + 8, Flags: DeviceFeatureGet | FeatureDMALoggingRep}.Append(nil))),
		msg(27, CmdDeviceFeature, DeviceFeatureMsg{Argsz: DeviceFeatureSize, Flags: DeviceFeatureSet | FeatureDMALoggingStop}.Append(nil)),
	}
}

// dmaLogStart is a DEVICE_FEATURE SET DMA_LOGGING_START payload.
func dmaLogStart(ranges ...DMALoggingRange) []byte {
	b := DeviceFeatureMsg{Argsz: uint32(DeviceFeatureSize + DMALoggingControlSize + len(ranges)*DMALoggingRangeSize),
		Flags: DeviceFeatureSet | FeatureDMALoggingStart}.Append(nil)
	b = DMALoggingControl{PageSize: 4096, NumRanges: uint32(len(ranges))}.Append(b)
	for _, r := range ranges {
		b = r.Append(b)
	}
	return b
}

// migState is a DEVICE_FEATURE SET MIG_DEVICE_STATE payload.
func migState(s MigState) []byte {
	m := DeviceFeatureMsg{Argsz: DeviceFeatureSize + MigStateFeatSize, Flags: DeviceFeatureSet | FeatureMigDeviceState}.Append(nil)
	return MigStateFeature{DeviceState: uint32(s), DataFD: -1}.Append(m)
}

// FuzzServerMessage feeds arbitrary bytes to a server's request loop (the
// first byte's bit 0 says whether VERSION is already negotiated, bit 1
// whether the device is the plain fake or a fresh migrating one, bit 2
// whether it is instead a fresh one with a DMA log). The loop
// must not panic and must end when the input does.
func FuzzServerMessage(f *testing.F) {
	seeds := serverMessageSeeds()
	for _, s := range seeds {
		f.Add(append([]byte{1}, s...))
		f.Add(append([]byte{3}, s...))
	}
	f.Add(append([]byte{0}, bytes.Join(seeds, nil)...))
	f.Add(append([]byte{2}, bytes.Join(seeds, nil)...))
	f.Add(append([]byte{7}, bytes.Join(seeds, nil)...))
	plain := newFakeDevice(f)
	blob := migrationBlob(10 << 10)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		negotiated, b0, b := b[0]&1 == 1, b[0], b[1:]
		var dev Device = plain
		if b0&2 == 0 {
			dev = newFakeMigrator(plain, MigrationStopCopy|MigrationPreCopy, blob, 1000)
		}
		if b0&4 != 0 {
			dev = &fakeLogger{fakeDevice: plain}
		}
		cli, srvConn := socketPair(t)
		defer cli.Close()
		srv := NewServer(ServerConfig{Device: dev, Log: zerolog.Nop(), MaxDataXfer: 4096})
		tr := newTransport(srvConn)
		tr.msgTimeout = DefaultMessageTimeout // arms and clears deadlines; never expires, the input is all there
		sess := &session{srv: srv, t: tr, log: zerolog.Nop(), maxXfer: 4096, negotiated: negotiated}
		done := make(chan error, 1)
		go func() {
			err := sess.run()
			srvConn.Close()
			srv.dma.UnmapAll()
			srv.irqs.Close()
			done <- err
		}()
		drained := make(chan struct{})
		go func() { // read replies so the server never blocks on a full socket
			defer close(drained)
			tr := newTransport(cli)
			for {
				m, err := tr.recv(1 << 20)
				if m != nil {
					m.closeFDs()
				}
				var fe *frameError
				if err != nil && !errors.As(err, &fe) {
					return
				}
			}
		}()
		if _, err := cli.Write(b); err != nil {
			t.Fatalf("writing input: %v", err)
		}
		cli.CloseWrite()
		<-drained
		if err := <-done; !isDisconnect(err) {
			t.Fatalf("request loop ended with %v", err)
		}
		if fm, ok := dev.(*fakeMigrator); ok {
			fm.takeHops(t) // fails on any call outside the Migrator contract
		}
	})
}
