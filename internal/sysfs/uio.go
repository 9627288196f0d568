package sysfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
)

// moduleInitCompressedFile asks finit_module to decompress the module
// (include/uapi/linux/module.h, MODULE_INIT_COMPRESSED_FILE).
const moduleInitCompressedFile = 4

// LoadModule loads a kernel module file (plain or compressed .ko.xz/.ko.zst)
// with finit_module. A module that is already loaded is not an error.
func LoadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sysfs: %w", err)
	}
	defer f.Close()
	flags := 0
	if strings.HasSuffix(path, ".xz") || strings.HasSuffix(path, ".zst") || strings.HasSuffix(path, ".gz") {
		flags = moduleInitCompressedFile
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("sysfs: loading %s: %w", filepath.Base(path), err)
	}
	return nil
}

// bindUIO binds the device to uio_pci_generic (which must be loaded) and
// opens its /dev/uioN.
func bindUIO(dir, sysRoot, devRoot string) (*os.File, error) {
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
	uios, err := filepath.Glob(filepath.Join(dir, "uio/uio*"))
	if err != nil || len(uios) == 0 {
		return nil, fmt.Errorf("sysfs: uio_pci_generic did not bind %s (is INTx masking supported?)", filepath.Base(dir))
	}
	f, err := os.OpenFile(filepath.Join(devRoot, filepath.Base(uios[0])), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	return f, nil
}
