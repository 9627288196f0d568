package guest

import (
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// localDriver is a Driver's local-memory state alone: size bytes of local
// memory, CAPS caps (no device behind it: AllocDevice touches none).
func localDriver(caps uint32, size uint64) *Driver {
	d := &Driver{caps: caps, localSize: size, localDev: map[uint64]bool{}}
	d.localPages.init(size)
	return d
}

// TestAllocDevice: local memory by device address needs CAPS bit 6, hands
// out page-rounded local offsets up to all of local memory, and refuses
// to free what it did not hand out.
func TestAllocDevice(t *testing.T) {
	if _, err := localDriver(abi.CapLocalMem, 1<<20).AllocDevice(1); !errors.Is(err, ErrNoGraphicsMemory) {
		t.Fatalf("AllocDevice without CAPS bit 6: %v, want ErrNoGraphicsMemory", err)
	}
	d := localDriver(abi.CapLocalMem|abi.CapDeviceAddr, 1<<20)
	a, err := d.AllocDevice(1)
	if err != nil || a != 0 {
		t.Fatalf("AllocDevice(1) = %#x, %v", a, err)
	}
	b, err := d.AllocDevice(1<<20 - abi.PageSize)
	if err != nil || b != abi.PageSize {
		t.Fatalf("AllocDevice(the rest) = %#x, %v", b, err)
	}
	if _, err := d.AllocDevice(1); !errors.Is(err, ErrNoGraphicsMemory) {
		t.Fatalf("AllocDevice with local memory full: %v", err)
	}
	if err := d.FreeDevice(b + abi.PageSize); err == nil {
		t.Fatal("FreeDevice of an offset inside an allocation accepted")
	}
	if err := d.FreeDevice(b); err != nil {
		t.Fatal(err)
	}
	if err := d.FreeDevice(b); err == nil {
		t.Fatal("double FreeDevice accepted")
	}
	if got := d.DeviceFreeBytes(); got != 1<<20-abi.PageSize {
		t.Fatalf("DeviceFreeBytes = %d, want %d", got, 1<<20-abi.PageSize)
	}
}
