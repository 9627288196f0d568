package vfio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// migration is a Server's side of a Migrator: the FSM state, kept across
// connections ("the device state should otherwise be retained" when a client
// goes away). Only the request goroutine changes it; mu lets Server.MigState
// read it from elsewhere.
type migration struct {
	dev   Migrator
	flags uint64 // what the server advertises: the device's flags less P2P

	mu    sync.Mutex
	state MigState
}

// newMigration returns the migration side of dev, or nil when dev is not a
// Migrator or cannot stop-copy (vfio-user.rst: "at least
// VFIO_MIGRATION_STOP_COPY must be set").
func newMigration(dev Device) *migration {
	m, ok := dev.(Migrator)
	if !ok {
		return nil
	}
	flags := m.MigrationFlags() & (MigrationStopCopy | MigrationPreCopy)
	if flags&MigrationStopCopy == 0 {
		return nil
	}
	return &migration{dev: m, flags: flags, state: MigStateRunning}
}

func (mg *migration) get() MigState {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return mg.state
}

func (mg *migration) set(s MigState) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	mg.state = s
}

// check moves the FSM to ERROR when the device says it lost its state.
func (mg *migration) check(err error) {
	if errors.Is(err, ErrMigStateLost) {
		mg.set(MigStateError)
	}
}

// walk moves the device to target one arc at a time. A failing arc leaves
// the state where the last good one ended (or at ERROR, see check); the
// client may see any state along the path (vfio.h: "the user may see any step
// along the path in the device_state if SET_STATE fails").
func (mg *migration) walk(target MigState) error {
	for {
		cur := mg.get()
		next, err := NextHop(cur, target, mg.flags)
		if err != nil {
			return err
		}
		if next == cur {
			return nil
		}
		if err := mg.dev.SetMigState(cur, next); err != nil {
			mg.check(err)
			return fmt.Errorf("vfio: migration arc %s -> %s: %w", cur, next, err)
		}
		mg.set(next)
	}
}

// read fills p from the device for as long as it has data, so that a reply
// shorter than asked means "no more migration data" (vfio-user.rst,
// "VFIO_USER_MIG_DATA_READ": "If this is less than the requested size, there
// is no more migration data to read").
func (mg *migration) read(p []byte) (int, error) {
	got := 0
	for got < len(p) {
		n, err := mg.dev.MigDataRead(p[got:])
		if n < 0 || n > len(p)-got {
			return 0, fmt.Errorf("vfio: device read %d migration bytes into %d", n, len(p)-got)
		}
		got += n
		switch {
		case err == io.EOF:
			return got, nil
		case err != nil:
			mg.check(err)
			return 0, fmt.Errorf("vfio: reading migration data: %w", err)
		case n == 0:
			return got, nil
		}
	}
	return got, nil
}

// MigState returns the hosted device's migration state; ok is false when the
// device does not migrate through the protocol.
func (s *Server) MigState() (state MigState, ok bool) {
	if s.mig == nil {
		return 0, false
	}
	return s.mig.get(), true
}

// deviceFeature is one entry of the feature table: the operations it
// supports, its data size and its GET and SET actions.
type deviceFeature struct {
	ops  uint32 // DeviceFeatureGet and/or DeviceFeatureSet
	size int
	get  func(mg *migration) []byte
	set  func(mg *migration, data []byte) error
}

// deviceFeatures is the feature table of the migration features. The DMA
// logging features are answered by handleDMALogging (dmalog.go) for a
// device that logs its DMA; any other feature answers ENOTSUP, to a PROBE
// as well.
var deviceFeatures = map[uint32]deviceFeature{
	FeatureMigration: {ops: DeviceFeatureGet, size: MigrationFeatSize,
		get: func(mg *migration) []byte { return MigrationFeature{Flags: mg.flags}.Append(nil) }},
	FeatureMigDeviceState: {ops: DeviceFeatureGet | DeviceFeatureSet, size: MigStateFeatSize,
		get: func(mg *migration) []byte {
			return MigStateFeature{DeviceState: uint32(mg.get()), DataFD: -1}.Append(nil)
		},
		set: func(mg *migration, data []byte) error {
			st, err := DecodeMigStateFeature(data)
			if err != nil {
				return err
			}
			return mg.walk(MigState(st.DeviceState))
		}},
	FeatureMigDataSize: {ops: DeviceFeatureGet, size: MigDataSizeFeatSz,
		get: func(mg *migration) []byte {
			return MigDataSizeFeature{StopCopyLength: mg.dev.MigDataSize()}.Append(nil)
		}},
}

// handleDeviceFeature follows vfio-user.rst "VFIO_USER_DEVICE_FEATURE" for
// the layout and linux/vfio.h VFIO_DEVICE_FEATURE for the checks: argsz at
// least the fixed part (and the feature's data for GET and SET), no unknown
// flag bits, GET and SET together only with PROBE, at least one of the
// three. A PROBE is answered with the request payload when the feature
// supports every operation named with it; a SET with the request payload
// once done; a GET with the data appended and argsz set to the whole.
func handleDeviceFeature(s *session, m *message) ([]byte, []*os.File, error) {
	if _, logs := s.srv.dev.(DMALogger); s.srv.mig == nil && !logs {
		return nil, nil, fmt.Errorf("%w: device neither migrates nor logs its DMA", ErrUnsupported)
	}
	req, err := decodeArgsz(m, DecodeDeviceFeatureMsg, func(v DeviceFeatureMsg) uint32 { return v.Argsz }, DeviceFeatureSize)
	if err != nil {
		return nil, nil, err
	}
	ops := req.Flags & (DeviceFeatureGet | DeviceFeatureSet | DeviceFeatureProbe)
	getSet := ops & (DeviceFeatureGet | DeviceFeatureSet)
	switch {
	case req.Flags&^(DeviceFeatureMask|ops) != 0:
		return nil, nil, fmt.Errorf("%w: device feature flags %#x", ErrInvalid, req.Flags)
	case ops == 0:
		return nil, nil, fmt.Errorf("%w: device feature without GET, SET or PROBE", ErrInvalid)
	case ops&DeviceFeatureProbe == 0 && getSet == DeviceFeatureGet|DeviceFeatureSet:
		return nil, nil, fmt.Errorf("%w: device feature GET and SET together", ErrInvalid)
	}
	index := req.Flags & DeviceFeatureMask
	if dmaLogFeature(index) {
		frame, err := handleDMALogging(s, m, req, getSet)
		return frame, nil, err
	}
	mg := s.srv.mig
	if mg == nil {
		return nil, nil, fmt.Errorf("%w: device does not migrate", ErrUnsupported)
	}
	f, ok := deviceFeatures[index]
	if !ok {
		return nil, nil, fmt.Errorf("%w: device feature %d", ErrUnsupported, index)
	}
	if getSet&^f.ops != 0 {
		return nil, nil, fmt.Errorf("%w: device feature %d does not support flags %#x", ErrInvalid, index, getSet)
	}
	if ops&DeviceFeatureProbe != 0 {
		return append(newFrame(len(m.payload)), m.payload...), nil, nil
	}
	full := uint32(DeviceFeatureSize + f.size)
	if req.Argsz < full {
		return nil, nil, fmt.Errorf("%w: device feature %d argsz %d below %d", ErrInvalid, index, req.Argsz, full)
	}
	if getSet == DeviceFeatureGet {
		reply := DeviceFeatureMsg{Argsz: full, Flags: req.Flags}
		return append(reply.Append(newFrame(int(full))), f.get(mg)...), nil, nil
	}
	if len(m.payload) < int(full) {
		return nil, nil, errShort("device feature set data", int(full), len(m.payload))
	}
	if err := f.set(mg, m.payload[DeviceFeatureSize:full]); err != nil {
		return nil, nil, err
	}
	return append(newFrame(len(m.payload)), m.payload...), nil, nil
}

// handleMigDataRead answers with up to size bytes of the device's migration
// data, legal in PRE_COPY and STOP_COPY only (EINVAL otherwise, as
// libvfio-user does). argsz must cover the reply with size bytes; size is
// bounded by max_data_xfer_size (E2BIG, as for REGION_READ).
func handleMigDataRead(s *session, m *message) ([]byte, []*os.File, error) {
	mg := s.srv.mig
	if mg == nil {
		return nil, nil, fmt.Errorf("%w: device does not migrate", ErrUnsupported)
	}
	req, err := decodeArgsz(m, DecodeMigDataMsg, func(v MigDataMsg) uint32 { return v.Argsz }, MigDataSize)
	if err != nil {
		return nil, nil, err
	}
	if uint64(req.Argsz) < MigDataSize+uint64(req.Size) {
		return nil, nil, fmt.Errorf("%w: mig data read argsz %d for %d bytes", ErrInvalid, req.Argsz, req.Size)
	}
	if req.Size > s.maxXfer {
		return nil, nil, fmt.Errorf("%w: mig data read of %d bytes, max_data_xfer_size %d", ErrTooBig, req.Size, s.maxXfer)
	}
	if st := mg.get(); !st.saving() {
		return nil, nil, fmt.Errorf("%w: mig data read in state %s", ErrInvalid, st)
	}
	frame := newFrame(MigDataSize + int(req.Size))
	data := frame[HeaderSize+MigDataSize : HeaderSize+MigDataSize+int(req.Size)]
	n, err := mg.read(data)
	if err != nil {
		return nil, nil, err
	}
	frame = MigDataMsg{Argsz: MigDataSize + uint32(n), Size: uint32(n)}.Append(frame)
	return frame[:HeaderSize+MigDataSize+n], nil, nil
}

// handleMigDataWrite passes size bytes of incoming migration data to the
// device, legal in RESUMING only. size must match the data carried and stay
// within max_data_xfer_size. argsz is only held to the fixed part: the
// specification calls it the reply's maximum size and the reply is empty
// (libvfio-user wants argsz to cover the data too, which Client sends).
func handleMigDataWrite(s *session, m *message) ([]byte, []*os.File, error) {
	mg := s.srv.mig
	if mg == nil {
		return nil, nil, fmt.Errorf("%w: device does not migrate", ErrUnsupported)
	}
	req, err := decodeArgsz(m, DecodeMigDataMsg, func(v MigDataMsg) uint32 { return v.Argsz }, MigDataSize)
	if err != nil {
		return nil, nil, err
	}
	data := m.payload[MigDataSize:]
	if uint64(len(data)) != uint64(req.Size) {
		return nil, nil, fmt.Errorf("%w: mig data write size %d with %d data bytes", ErrInvalid, req.Size, len(data))
	}
	if req.Size > s.maxXfer {
		return nil, nil, fmt.Errorf("%w: mig data write of %d bytes, max_data_xfer_size %d", ErrTooBig, req.Size, s.maxXfer)
	}
	if st := mg.get(); st != MigStateResuming {
		return nil, nil, fmt.Errorf("%w: mig data write in state %s", ErrInvalid, st)
	}
	if err := mg.dev.MigDataWrite(data); err != nil {
		mg.check(err)
		return nil, nil, fmt.Errorf("vfio: writing migration data: %w", err)
	}
	return nil, nil, nil
}
