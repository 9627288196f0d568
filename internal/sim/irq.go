package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/vfio"
)

// irqs is the interrupt wiring: a trigger eventfd the server signals and,
// for INTx, the unmask (resample) eventfd the guest's EOI writes.
type irqs struct {
	mu         sync.Mutex // serializes WaitIRQ
	trigger    *os.File
	unmask     *os.File // nil for MSI
	eoiPending bool     // an INTx interrupt was taken and not yet EOI'd
}

func (b *Bus) setupIRQs() error {
	if b.opts.NoIRQ {
		return nil
	}
	var err error
	if b.irq.trigger, err = newEventfd("gmig-irq-trigger"); err != nil {
		return err
	}
	if b.opts.MSI {
		if err := b.enableMSI(); err != nil {
			return err
		}
		return b.setIRQ(vfio.PCIMSIIRQIndex, vfio.IRQSetActionTrigger, b.irq.trigger)
	}
	if b.irq.unmask, err = newEventfd("gmig-irq-unmask"); err != nil {
		return err
	}
	if err := b.setIRQ(vfio.PCIINTxIRQIndex, vfio.IRQSetActionTrigger, b.irq.trigger); err != nil {
		return err
	}
	return b.setIRQ(vfio.PCIINTxIRQIndex, vfio.IRQSetActionUnmask, b.irq.unmask)
}

func (b *Bus) setIRQ(index, action uint32, f *os.File) error {
	err := b.c.SetIRQs(vfio.IRQSet{
		Index: index, Flags: vfio.IRQSetDataEventfd | action, Start: 0, Count: 1,
		FDs: []*os.File{f},
	})
	if err != nil {
		return fmt.Errorf("sim: SET_IRQS index %d action %#x: %w", index, action, err)
	}
	return nil
}

// WaitIRQ implements guest.Bus: it sends the EOI for the previous INTx
// interrupt (the guest handler has acknowledged the device by now), then
// blocks until the trigger eventfd fires or ctx ends.
func (b *Bus) WaitIRQ(ctx context.Context) error {
	q := &b.irq
	if q.trigger == nil {
		return guest.ErrNoIRQ
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.eoiPending {
		if _, err := q.unmask.Write(binary.LittleEndian.AppendUint64(nil, 1)); err != nil {
			return fmt.Errorf("sim: EOI: %w", err)
		}
		q.eoiPending = false
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		q.trigger.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
		q.trigger.SetReadDeadline(time.Time{})
	}()
	var buf [8]byte
	if _, err := q.trigger.Read(buf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("sim: reading the interrupt eventfd: %w", err)
	}
	q.eoiPending = q.unmask != nil
	return nil
}

func (q *irqs) close() error {
	var errs []error
	for _, f := range []*os.File{q.trigger, q.unmask} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}
