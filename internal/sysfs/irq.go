package sysfs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// IRQMode is how a Bus receives the vGPU's interrupts.
type IRQMode int

// Interrupt modes.
const (
	// IRQNone: no interrupts; WaitIRQ returns guest.ErrNoIRQ and the
	// driver polls.
	IRQNone IRQMode = iota
	// IRQINTx: the INTx line through uio_pci_generic (modules uio,
	// uio_pci_generic).
	IRQINTx
	// IRQMSI: MSI through vfio-pci, signalled on an eventfd (modules vfio,
	// vfio_iommu_type1, vfio-pci and, with a virtual IOMMU,
	// virtio-iommu). See vfio.go.
	IRQMSI
)

var irqModeNames = [...]string{IRQNone: "none", IRQINTx: "intx", IRQMSI: "msi"}

func (m IRQMode) String() string {
	if m >= 0 && int(m) < len(irqModeNames) {
		return irqModeNames[m]
	}
	return fmt.Sprintf("IRQMode(%d)", int(m))
}

// ParseIRQMode parses "none", "intx" or "msi".
func ParseIRQMode(s string) (IRQMode, error) {
	for m, name := range irqModeNames {
		if s == name {
			return IRQMode(m), nil
		}
	}
	return 0, fmt.Errorf("sysfs: interrupt mode %q: want intx, msi or none", s)
}

// irqSource is where a Bus's WaitIRQ sleeps.
type irqSource interface {
	wait(ctx context.Context) error
	count() uint64 // interrupts received (see each source)
	close() error
}

// waitReadable blocks until fd is readable or ctx ends, waking every 100 ms
// to look at ctx.
func waitReadable(ctx context.Context, fd int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		ms := 100
		if dl, ok := ctx.Deadline(); ok {
			ms = max(0, min(ms, int(time.Until(dl).Milliseconds())))
		}
		k, err := unix.Poll(fds, ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll: %w", err)
		}
		if k > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
