package sysfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
)

// uioIRQ is INTx through uio_pci_generic: a read of /dev/uioN blocks until
// the line fires; the kernel masked it with the command register's
// INTx-disable bit, which user space clears again.
type uioIRQ struct {
	b *Bus
	f *os.File
	n uint32 // uio's event count at the last wait: interrupts uio_pci_generic handled
}

// bindUIO binds the device to uio_pci_generic (which must be loaded) and
// opens its /dev/uioN.
func bindUIO(b *Bus, sysRoot, devRoot string) (*uioIRQ, error) {
	drv := filepath.Join(sysRoot, "bus/pci/drivers/uio_pci_generic")
	if _, err := os.Stat(drv); err != nil {
		return nil, fmt.Errorf("sysfs: uio_pci_generic is not loaded: %w", err)
	}
	id := fmt.Sprintf("%04x %04x", abi.PCIVendorID, abi.PCIDeviceID)
	// new_id binds every matching unbound device; EEXIST means the ID was
	// added before.
	if err := os.WriteFile(filepath.Join(drv, "new_id"), []byte(id), 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("sysfs: adding %s to uio_pci_generic: %w", id, err)
	}
	uios, err := filepath.Glob(filepath.Join(b.dir, "uio/uio*"))
	if err != nil || len(uios) == 0 {
		return nil, fmt.Errorf("sysfs: uio_pci_generic did not bind %s (is INTx masking supported?)", filepath.Base(b.dir))
	}
	f, err := os.OpenFile(filepath.Join(devRoot, filepath.Base(uios[0])), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	return &uioIRQ{b: b, f: f}, nil
}

// wait blocks on /dev/uioN until INTx fires, then re-enables INTx. The
// caller acknowledges the cause in INT_STATUS, which deasserts the line.
func (u *uioIRQ) wait(ctx context.Context) error {
	if err := waitReadable(ctx, int(u.f.Fd())); err != nil {
		return fmt.Errorf("sysfs: waiting on uio: %w", err)
	}
	var n [4]byte
	if _, err := u.f.Read(n[:]); err != nil {
		return fmt.Errorf("sysfs: reading uio: %w", err)
	}
	u.n = binary.NativeEndian.Uint32(n[:])
	// uio_pci_generic masked INTx with the command register's INTx-disable
	// bit and has no irqcontrol: user space unmasks it in config space.
	if err := u.b.setCommand(0, pciCommandINTxDisable); err != nil {
		return fmt.Errorf("sysfs: re-enabling INTx: %w", err)
	}
	return nil
}

// count is the number of interrupts uio_pci_generic handled (those the
// device raised; the kernel's own count in /proc/interrupts also has the
// ones the handler found not to be the device's), as of the last wait.
func (u *uioIRQ) count() uint64 { return uint64(u.n) }

func (u *uioIRQ) close() error { return u.f.Close() }
