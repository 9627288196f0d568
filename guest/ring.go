package guest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gmig-dev/gmig/abi"
)

// Command submission (docs/device-abi.md §5): commands go into the ring
// through the aperture, wrapping at its end; DOORBELL publishes them.

// Submit appends cmds (one or more encoded commands, a multiple of 8
// bytes) to the ring without ringing the doorbell. When the ring is full it
// rings the doorbell and waits for RING_HEAD to advance. A failure is
// sticky: later submissions and the next Wait return it.
func (d *Driver) Submit(cmds []byte) error {
	if d.err != nil {
		return d.err
	}
	n := uint32(len(cmds))
	if n == 0 || n%abi.CmdAlign != 0 || len(cmds) > int(d.ringSize)-abi.CmdAlign {
		return fmt.Errorf("guest: submitting %d bytes: not a multiple of %d below the ring size", len(cmds), abi.CmdAlign)
	}
	if err := d.reserve(n); err != nil {
		d.err = err
		return err
	}
	first := min(n, d.ringSize-d.tail)
	err := d.WriteGA(d.ringBase+uint64(d.tail), cmds[:first])
	if err == nil && first < n {
		err = d.WriteGA(d.ringBase, cmds[first:])
	}
	if err != nil {
		d.err = fmt.Errorf("guest: writing the ring: %w", err)
		return d.err
	}
	d.tail = (d.tail + n) & (d.ringSize - 1)
	return nil
}

// Flush rings the doorbell with the current tail if commands are pending.
func (d *Driver) Flush() error {
	if d.err != nil {
		return d.err
	}
	if d.tail == d.flushed {
		return nil
	}
	if err := d.bus.WriteReg32(abi.RegDoorbell, d.tail); err != nil {
		d.err = fmt.Errorf("guest: ringing the doorbell: %w", err)
		return d.err
	}
	d.flushed = d.tail
	return nil
}

// space is the number of bytes that may be added while keeping 8 free.
func (d *Driver) space() uint32 {
	used := (d.tail - d.head) & (d.ringSize - 1)
	return d.ringSize - abi.CmdAlign - used
}

// reserve makes room for n bytes, waiting for the engine when needed.
func (d *Driver) reserve(n uint32) error {
	if d.space() >= n {
		return nil
	}
	if err := d.Flush(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.Timeout)
	defer cancel()
	var p poller
	for {
		head, err := d.bus.ReadReg32(abi.RegRingHead)
		if err != nil {
			return fmt.Errorf("guest: reading RING_HEAD: %w", err)
		}
		d.head = head
		if d.space() >= n {
			return nil
		}
		if err := p.wait(ctx); err != nil {
			return fmt.Errorf("guest: waiting for ring space (head %#x, tail %#x): %w", head, d.tail, err)
		}
	}
}

// Fence appends a FENCE with the next fence value and flags (abi.Fence*),
// rings the doorbell and returns the value. With FenceWriteMem the value
// lands in FenceSlot; with Options.UseIRQ FenceInterrupt is always added.
// A submission failure surfaces from the next Wait.
func (d *Driver) Fence(flags uint16) uint64 { return d.FenceAt(flags, d.fenceSlot) }

// FenceAt is Fence with FenceWriteMem's target at graphics address addr.
func (d *Driver) FenceAt(flags uint16, addr uint64) uint64 {
	if d.opts.UseIRQ {
		flags |= abi.FenceInterrupt
	}
	d.fence++
	if d.put(AppendFence(d.buf[:0], flags, d.fence, addr)) == nil {
		_ = d.Flush()
	}
	return d.fence
}

// Wait waits until FENCE_DONE reaches value — sleeping on interrupts with
// Options.UseIRQ, polling otherwise — then checks ERR_STATUS. A device
// error is returned as a *DeviceError (cleared on the device); when the
// batch holding the fence was dropped the error also wraps ErrFenceLost.
func (d *Driver) Wait(ctx context.Context, value uint64) error {
	return d.wait(ctx, value, d.opts.UseIRQ)
}

// Sync issues a fence and waits for it.
func (d *Driver) Sync(ctx context.Context) error { return d.Wait(ctx, d.Fence(0)) }

// waitable checks that value can be waited for (no sticky submission
// error, a fence issued) and rings the doorbell for what is unrung.
func (d *Driver) waitable(value uint64) error {
	if d.err != nil {
		return d.err
	}
	if value > d.fence {
		return fmt.Errorf("guest: waiting for fence %d, only %d issued", value, d.fence)
	}
	return d.Flush()
}

func (d *Driver) wait(ctx context.Context, value uint64, irq bool) error {
	if err := d.waitable(value); err != nil {
		return err
	}
	werr := d.waitFence(ctx, value, irq)
	if werr != nil && !errors.Is(werr, ErrFenceLost) {
		return werr
	}
	cerr := d.CheckErrors()
	var de *DeviceError
	switch {
	case werr != nil && errors.As(cerr, &de):
		return fmt.Errorf("%w: %w", werr, de)
	case werr != nil:
		return errors.Join(werr, cerr)
	}
	return cerr
}

// waitFence returns nil once FENCE_DONE >= value, or ErrFenceLost when the
// ring drained below the fence with an error pending.
func (d *Driver) waitFence(ctx context.Context, value uint64, irq bool) error {
	var p poller
	for {
		done, err := d.bus.ReadReg64(abi.RegFenceDone)
		if err != nil {
			return fmt.Errorf("guest: reading FENCE_DONE: %w", err)
		}
		if done >= value {
			return nil
		}
		if d.head, err = d.bus.ReadReg32(abi.RegRingHead); err != nil {
			return fmt.Errorf("guest: reading RING_HEAD: %w", err)
		}
		if d.head == d.flushed {
			// Drained: either the fence retired since we looked, or it
			// was dropped with the batch holding it.
			if done, err = d.bus.ReadReg64(abi.RegFenceDone); err != nil {
				return fmt.Errorf("guest: reading FENCE_DONE: %w", err)
			}
			if done >= value {
				return nil
			}
			st, err := d.bus.ReadReg32(abi.RegErrStatus)
			if err != nil {
				return fmt.Errorf("guest: reading ERR_STATUS: %w", err)
			}
			if st != 0 {
				return fmt.Errorf("%w (fence %d, done %d)", ErrFenceLost, value, done)
			}
			irq = false // no interrupt will come for a drained ring: poll
		}
		if !irq {
			if err := p.wait(ctx); err != nil {
				return d.waitError(value, err)
			}
			continue
		}
		// Clear pending causes before sleeping, so the next cause is a new
		// edge (MSI sends one message per edge) and none is slept through.
		st, err := d.ackInterrupts()
		if err != nil {
			return err
		}
		if st&abi.IntError != 0 {
			// The engine raises an error before it drops the rest of the
			// batch (head jumps to the tail after the interrupt); no
			// interrupt marks that jump, so finish this wait by polling.
			irq = false
		}
		if st != 0 {
			continue // something happened: look again before sleeping
		}
		if err := d.bus.WaitIRQ(ctx); errors.Is(err, ErrNoIRQ) {
			irq = false
		} else if err != nil {
			return d.waitError(value, err)
		}
	}
}

// waitError describes a wait that ended without its fence, with the
// device's view for diagnosis.
func (d *Driver) waitError(value uint64, err error) error {
	done, _ := d.bus.ReadReg64(abi.RegFenceDone)
	head, _ := d.bus.ReadReg32(abi.RegRingHead)
	tail, _ := d.bus.ReadReg32(abi.RegRingTail)
	ist, _ := d.bus.ReadReg32(abi.RegIntStatus)
	est, _ := d.bus.ReadReg32(abi.RegErrStatus)
	return fmt.Errorf("guest: waiting for fence %d (done %d, head %#x, tail %#x, driver tail %#x, INT_STATUS %#x, ERR_STATUS %#x): %w",
		value, done, head, tail, d.flushed, ist, est, err)
}

// ackInterrupts reads INT_STATUS and clears the causes it found, so the
// line drops (INTx) and the next cause sends a new message (MSI).
// It returns the causes.
func (d *Driver) ackInterrupts() (uint32, error) {
	st, err := d.bus.ReadReg32(abi.RegIntStatus)
	if err != nil {
		return 0, fmt.Errorf("guest: reading INT_STATUS: %w", err)
	}
	if st == 0 {
		return 0, nil
	}
	if err := d.bus.WriteReg32(abi.RegIntStatus, st); err != nil {
		return 0, fmt.Errorf("guest: acknowledging INT_STATUS: %w", err)
	}
	return st, nil
}

// poller paces register polling: a few immediate retries, then sleeps
// growing to pollMaxSleep. It polls a device register, it does not stand in
// for synchronization.
type poller struct{ n int }

const (
	pollSpins    = 32
	pollMaxSleep = 200 * time.Microsecond
)

func (p *poller) wait(ctx context.Context) error {
	p.n++
	if p.n <= pollSpins {
		runtime.Gosched()
		return ctx.Err()
	}
	t := time.NewTimer(min(time.Duration(p.n-pollSpins)*5*time.Microsecond, pollMaxSleep))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
