package guest

import (
	"context"
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// Streams (docs/device-abi.md §5.1, ABI 1.2): on a device with
// abi.CapStreams every command carries a stream id (0, the default, is the
// stream of every earlier guest). The device keeps, per stream, the last
// fence retired on it and its first error as a CUDA driver API code
// (abi.Cuda*); a stream with an error skips its commands other than FENCE
// until the error is cleared, so a guest CUDA library maps a stream onto
// an id, cuStreamSynchronize onto Fence + WaitStream and the error it
// returns onto StreamError.Code.

// StreamError is a stream's error as the device reports it.
type StreamError struct {
	Stream uint8
	Code   uint32 // abi.Cuda*: the CUresult a CUDA call returns
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("guest: stream %d failed with CUDA error %d", e.Stream, e.Code)
}

// ErrNoStreams is returned for a stream other than 0 on a device without
// streams.
var ErrNoStreams = errors.New("guest: the device has no streams")

// Streams reports whether the device has streams (CAPS bit 5).
func (d *Driver) Streams() bool { return d.caps&abi.CapStreams != 0 }

// SetStream puts the commands the driver encodes from now on (Copy, Fill,
// DMA, kernels, Fence) on stream id. Any id but 0 needs a device with
// streams (ErrNoStreams otherwise). Commands passed to Submit are sent as
// they are.
func (d *Driver) SetStream(id uint8) error {
	if id != 0 && !d.Streams() {
		return fmt.Errorf("%w: stream %d", ErrNoStreams, id)
	}
	d.stream = id
	return nil
}

// Stream is the stream commands go on.
func (d *Driver) Stream() uint8 { return d.stream }

// StreamStatus reads stream id's error code (abi.Cuda*, 0 none) and the
// value of the last fence retired on it.
func (d *Driver) StreamStatus(id uint8) (code uint32, fence uint64, err error) {
	if code, err = d.bus.ReadReg32(abi.RegStreamErr + 4*uint32(id)); err != nil {
		return 0, 0, fmt.Errorf("guest: reading stream %d's error: %w", id, err)
	}
	if fence, err = d.bus.ReadReg64(abi.RegStreamFence + 8*uint32(id)); err != nil {
		return 0, 0, fmt.Errorf("guest: reading stream %d's fence: %w", id, err)
	}
	return code, fence, nil
}

// ClearStreamError clears stream id's error: its commands run again.
func (d *Driver) ClearStreamError(id uint8) error {
	if err := d.bus.WriteReg32(abi.RegStreamErr+4*uint32(id), 0); err != nil {
		return fmt.Errorf("guest: clearing stream %d's error: %w", id, err)
	}
	return nil
}

// WaitStream waits until fence value (issued on stream id) has retired and
// returns the stream's error as a *StreamError, nil if it has none. Unlike
// Wait it leaves ERR_STATUS alone: other streams' failures are theirs.
func (d *Driver) WaitStream(ctx context.Context, id uint8, value uint64) error {
	if d.err != nil {
		return d.err
	}
	if value > d.fence {
		return fmt.Errorf("guest: waiting for fence %d, only %d issued", value, d.fence)
	}
	if err := d.Flush(); err != nil {
		return err
	}
	if err := d.waitFence(ctx, value, d.opts.UseIRQ); err != nil {
		return err
	}
	code, _, err := d.StreamStatus(id)
	if err != nil {
		return err
	}
	if code != abi.CudaSuccess {
		return &StreamError{Stream: id, Code: code}
	}
	return nil
}
