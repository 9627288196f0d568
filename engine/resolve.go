package engine

import (
	"fmt"

	"github.com/gmig-dev/gmig/gtt"
)

// Address operands (docs/device-abi.md §1.4, §6). Every address a command
// names — COPY's source and destination, FILL's, DMA's graphics address,
// FENCE's, a module image, a parameter buffer, a built-in kernel's buffers
// — is resolved here. A range that starts below graphicsLimit is a
// graphics address, translated through the GTT. On a vGPU with device
// addresses (ABI 1.3: Config.Local and a back end DeviceAddrBase) a range
// inside [base, base+LOCAL_MEM_SIZE) is device-local memory, one
// contiguous host extent, no GTT. Anything else — a range that straddles
// either space's end, or lies outside both — is a page fault, as an
// unmapped graphics address is. The ring itself is in graphics memory
// only (RING_BASE is a graphics address, §5).

// graphicsLimit bounds graphics addresses: the GTT maps at most
// abi.GTTMaxEntries pages (2^16 × 4096 = 2^28 bytes), and every
// DEVICE_ADDR_BASE is at or above 2^32 (§1.4 guarantees both), so the two
// spaces never meet.
const graphicsLimit = 1 << 32

// appendResolver is a Resolver that fills a caller's buffer (gtt.Table
// is one), so that reads the engine makes for itself allocate nothing.
type appendResolver interface {
	AppendResolve(dst []gtt.Extent, ga, n uint64, write bool) ([]gtt.Extent, error)
}

// resolve translates the command operand [a, a+n); its error is a page
// fault.
func (e *Engine) resolve(a, n uint64, write bool) ([]gtt.Extent, error) {
	return e.resolveTo(nil, a, n, write, true)
}

// scratchResolve is resolve for reading into the engine's own reusable
// extents (a parameter buffer): valid until the next call.
func (e *Engine) scratchResolve(a, n uint64) ([]gtt.Extent, error) {
	return e.scratch(a, n, true)
}

// scratchResolveGfx is scratchResolve for graphics addresses alone (the
// ring fetch).
func (e *Engine) scratchResolveGfx(ga, n uint64) ([]gtt.Extent, error) {
	return e.scratch(ga, n, false)
}

func (e *Engine) scratch(a, n uint64, device bool) ([]gtt.Extent, error) {
	xs, err := e.resolveTo(e.xs[:0], a, n, false, device)
	if err == nil {
		e.xs = xs
	}
	return xs, err
}

// resolveTo is resolve appending to dst where it can (dst non-nil);
// device allows device addresses.
func (e *Engine) resolveTo(dst []gtt.Extent, a, n uint64, write, device bool) ([]gtt.Extent, error) {
	if a+n < a {
		return nil, fmt.Errorf("engine: address range %#x+%#x overflows", a, n)
	}
	if device && a >= graphicsLimit {
		if base := e.deviceAddrBase(); base != 0 {
			return e.resolveLocal(dst, base, a, n, write)
		}
	}
	var xs []gtt.Extent
	var err error
	if ar, ok := e.cfg.GTT.(appendResolver); ok && dst != nil {
		xs, err = ar.AppendResolve(dst, a, n, write)
	} else {
		xs, err = e.cfg.GTT.Resolve(a, n, write)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: resolving %#x+%#x: %w", a, n, err)
	}
	if got := gtt.TotalLen(xs); got != n {
		return nil, fmt.Errorf("engine: resolving %#x+%#x gave %d bytes", a, n, got)
	}
	return xs, nil
}

// deviceAddrBase is DEVICE_ADDR_BASE where the vGPU has device addresses,
// else 0.
func (e *Engine) deviceAddrBase() uint64 {
	if e.cfg.Local.Len == 0 {
		return 0
	}
	return e.cfg.Backend.DeviceAddrBase()
}

// resolveLocal resolves the device-address range [a, a+n) (a at or above
// graphicsLimit) into device-local memory: a range inside it is one
// extent; any other is an error wrapping gtt.ErrFault, the page fault an
// unmapped graphics address gives.
func (e *Engine) resolveLocal(dst []gtt.Extent, base, a, n uint64, write bool) ([]gtt.Extent, error) {
	size := e.cfg.Local.Len
	if a < base || a-base > size || n > size-(a-base) {
		access := "read"
		if write {
			access = "write"
		}
		return nil, fmt.Errorf("engine: %s of device addresses %#x+%#x outside device-local memory [%#x, %#x): %w",
			access, a, n, base, base+size, gtt.ErrFault)
	}
	if n == 0 {
		return dst, nil
	}
	return append(dst, gtt.Extent{Off: e.cfg.Local.Off + (a - base), Len: n}), nil
}
