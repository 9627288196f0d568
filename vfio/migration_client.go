package vfio

import (
	"errors"
	"fmt"
	"io"
)

// feature sends VFIO_USER_DEVICE_FEATURE with flags and data, asking for a
// reply of up to replyData bytes of feature data, and returns the reply's
// feature data.
func (c *Client) feature(flags uint32, data []byte, replyData int) ([]byte, error) {
	argsz := DeviceFeatureSize + max(len(data), replyData)
	frame := DeviceFeatureMsg{Argsz: uint32(argsz), Flags: flags}.Append(newFrame(DeviceFeatureSize + len(data)))
	reply, fds, err := c.call(CmdDeviceFeature, append(frame, data...), nil)
	closeFiles(fds)
	if err != nil {
		return nil, err
	}
	m, err := DecodeDeviceFeatureMsg(reply)
	if err != nil {
		return nil, fmt.Errorf("vfio: device feature reply: %w", err)
	}
	if m.Flags != flags {
		return nil, fmt.Errorf("%w: device feature reply flags %#x for %#x", ErrInvalid, m.Flags, flags)
	}
	return reply[DeviceFeatureSize:], nil
}

// getFeature GETs feature index and returns its size bytes of data.
func (c *Client) getFeature(index uint32, size int) ([]byte, error) {
	data, err := c.feature(index|DeviceFeatureGet, nil, size)
	if err != nil {
		return nil, err
	}
	if len(data) < size {
		return nil, fmt.Errorf("%w: feature %d reply of %d bytes, want %d", ErrInvalid, index, len(data), size)
	}
	return data, nil
}

// ProbeFeature asks whether the device supports feature (a Feature* index);
// nil means it does. An unsupported feature comes back wrapping ENOTSUP.
func (c *Client) ProbeFeature(feature uint32) error {
	_, err := c.feature(feature&DeviceFeatureMask|DeviceFeatureProbe, nil, 0)
	return err
}

// MigrationFlags returns the device's Migration* flags
// (VFIO_DEVICE_FEATURE_MIGRATION).
func (c *Client) MigrationFlags() (uint64, error) {
	data, err := c.getFeature(FeatureMigration, MigrationFeatSize)
	if err != nil {
		return 0, err
	}
	m, _ := DecodeMigrationFeature(data)
	return m.Flags, nil
}

// SetMigState asks the device to move to s, which it does through as many
// arcs as it takes; on failure the device may be anywhere on the way (see
// MigState).
func (c *Client) SetMigState(s MigState) error {
	_, err := c.feature(FeatureMigDeviceState|DeviceFeatureSet, MigStateFeature{DeviceState: uint32(s), DataFD: -1}.Append(nil), 0)
	return err
}

// MigState returns the device's migration state.
func (c *Client) MigState() (MigState, error) {
	data, err := c.getFeature(FeatureMigDeviceState, MigStateFeatSize)
	if err != nil {
		return 0, err
	}
	m, _ := DecodeMigStateFeature(data)
	return MigState(m.DeviceState), nil
}

// MigDataSize returns the device's estimate of its STOP_COPY data
// (VFIO_DEVICE_FEATURE_MIG_DATA_SIZE).
func (c *Client) MigDataSize() (uint64, error) {
	data, err := c.getFeature(FeatureMigDataSize, MigDataSizeFeatSz)
	if err != nil {
		return 0, err
	}
	m, _ := DecodeMigDataSizeFeature(data)
	return m.StopCopyLength, nil
}

// MigDataRead reads up to max bytes of migration data (at most the
// negotiated transfer size) in PRE_COPY or STOP_COPY. Fewer bytes than asked
// mean no more data: for now in PRE_COPY, at all in STOP_COPY.
func (c *Client) MigDataRead(max uint32) ([]byte, error) {
	size := min(max, c.maxXfer)
	req := MigDataMsg{Argsz: MigDataSize + size, Size: size}
	reply, fds, err := c.call(CmdMigDataRead, req.Append(newFrame(MigDataSize)), nil)
	closeFiles(fds)
	if err != nil {
		return nil, err
	}
	m, err := DecodeMigDataMsg(reply)
	if err != nil {
		return nil, fmt.Errorf("vfio: mig data read reply: %w", err)
	}
	data := reply[MigDataSize:]
	if m.Size > size || uint64(m.Size) != uint64(len(data)) {
		return nil, fmt.Errorf("%w: mig data read of %d answered with size %d and %d bytes", ErrInvalid, size, m.Size, len(data))
	}
	return data, nil
}

// MigDataWrite sends p as migration data in RESUMING, split by the
// negotiated transfer size.
func (c *Client) MigDataWrite(p []byte) error {
	return c.chunks(0, p, func(_ uint64, q []byte) error {
		req := MigDataMsg{Argsz: MigDataSize + uint32(len(q)), Size: uint32(len(q))}
		_, fds, err := c.call(CmdMigDataWrite, append(req.Append(newFrame(MigDataSize+len(q))), q...), nil)
		closeFiles(fds)
		return err
	})
}

// SaveDevice drives a whole save through the protocol, as a VMM would on the
// source, and writes the device's migration data stream to w. From RUNNING,
// when the device has PRE_COPY, it first copies what PRE_COPY offers while
// the device runs; then STOP_COPY to the end of the data; it leaves the
// device in STOP. On failure it tries to put the device back in the state
// it started from (a source roll-back) and returns the first error.
func (c *Client) SaveDevice(w io.Writer) error {
	start, err := c.MigState()
	if err != nil {
		return err
	}
	err = c.save(w, start)
	if err != nil && start != MigStateError {
		if rerr := c.SetMigState(start); rerr != nil {
			err = errors.Join(err, fmt.Errorf("vfio: rolling back to %s: %w", start, rerr))
		}
	}
	return err
}

func (c *Client) save(w io.Writer, start MigState) error {
	flags, err := c.MigrationFlags()
	if err != nil {
		return err
	}
	if start == MigStateRunning && flags&MigrationPreCopy != 0 {
		if err := c.SetMigState(MigStatePreCopy); err != nil {
			return err
		}
		if err := c.copyMigData(w); err != nil {
			return fmt.Errorf("vfio: pre-copy: %w", err)
		}
	}
	if err := c.SetMigState(MigStateStopCopy); err != nil {
		return err
	}
	if err := c.copyMigData(w); err != nil {
		return fmt.Errorf("vfio: stop-copy: %w", err)
	}
	return c.SetMigState(MigStateStop)
}

// copyMigData reads migration data into w until a short read.
func (c *Client) copyMigData(w io.Writer) error {
	for {
		data, err := c.MigDataRead(c.maxXfer)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("vfio: writing migration data: %w", err)
		}
		if len(data) < int(c.maxXfer) {
			return nil
		}
	}
}

// LoadDevice drives a whole resume through the protocol, as a VMM would on
// the destination: RESUMING, the data stream from r until EOF, then STOP,
// where the device checks what it got. It leaves the device in STOP; the VMM
// moves it to RUNNING when the guest runs. On failure the device is left
// where the failure did (a failed resume needs a reset, vfio.h: "To abort a
// RESUMING session the device must be reset").
func (c *Client) LoadDevice(r io.Reader) error {
	if err := c.SetMigState(MigStateResuming); err != nil {
		return err
	}
	buf := make([]byte, c.maxXfer)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if werr := c.MigDataWrite(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("vfio: reading migration data: %w", err)
		}
	}
	return c.SetMigState(MigStateStop)
}
