package guest

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// The kernel attack of a Hostile (AttackKernel, docs/security.md "Hostile
// guests"): the guest's own kernel, which stores a pattern wherever it is
// pointed, launched with a grid (docs/device-abi.md §6.10) over every
// device address the guest can name. Over its own device-local memory the
// launch must run and the pattern land. Anywhere else — just below and
// just above its own range, across the end of its local memory, 0, the
// top of the address space, values that look like graphics addresses, and
// every 1 GiB-aligned address of [32 TiB, 96 TiB), where the NVIDIA back
// end places every vGPU's local memory (§1.4) — the kernel must fault:
// the launch or the fence after it answers a KERNEL error and 719
// (CUDA_ERROR_LAUNCH_FAILED) on its stream. The first fault fails the
// vGPU's GPU context for good (§6.10), so every later launch, its own
// included, must be refused the same way: those are counted as refused.
// What keeps the kernel out of other vGPUs' memory is the GPU's MMU and
// the context the vGPU's kernels run in (docs/nvidia.md, "Isolation"):
// the program cannot see other vGPUs; the tests that run it check them.

// hostileKernelPTX is the kernel: scribble(dst, words, pattern).
//
//go:embed hostile_kernel.ptx
var hostileKernelPTX []byte

const (
	hostileKernelEntry  = "scribble"
	hostileKernelHandle = 0x6b726e6c // "krnl"
	hostileKernelParams = 20         // the entry's .param layout: u64, u64, u32
	hostileKernelStride = 24         // parameter buffers 8-aligned in their area
	hostileOwnBytes     = 16 << 10   // the device-local memory it scribbles on lawfully
	hostileStrayWords   = 1024       // 32-bit words each outside launch stores
	// hostileBatch is how many launches share one fence, each on a stream
	// of its own (1..255), so that each one's verdict is its stream's.
	hostileBatch = 255
	// The region where the NVIDIA back end reserves local memory, 1 GiB
	// aligned (docs/device-abi.md §1.4).
	devRegionLo   = 32 << 40
	devRegionHi   = 96 << 40
	devRegionStep = 1 << 30
	// hostileSweepSample is how many addresses of the region later kernel
	// steps try (the first step tries all 65536).
	hostileSweepSample = 64
)

// kernelTargets reports whether a device with CAPS caps runs guest modules
// on grids at device addresses: what the kernel attack aims with.
func kernelTargets(caps uint32) bool {
	const need = abi.CapModules | abi.CapLaunchGrid | abi.CapDeviceAddr | abi.CapLocalMem
	return caps&need == need
}

// hostileKernel is the kernel attack's set-up.
type hostileKernel struct {
	image    uint64 // graphics address of the module image
	imageLen uint32
	params   uint64 // graphics address of hostileBatch parameter buffers
	readback uint64 // graphics address the own scribble is copied to
	loaded   bool
	base     uint64 // DEVICE_ADDR_BASE
	local    uint64 // LOCAL_MEM_SIZE
	own      uint64 // device address of its own hostileOwnBytes
	swept    bool   // the whole region has been tried once
}

// stray is one launch outside its own memory.
type stray struct {
	what string
	dst  uint64
}

// attackKernel runs the kernel attack (see above).
func (h *Hostile) attackKernel(ctx context.Context) error {
	if h.kern == nil {
		if err := h.setupKernel(); err != nil {
			return err
		}
	}
	k, d := h.kern, h.d
	if d.Caps()&abi.CapModules == 0 {
		// A device that runs no modules (the software back end) refuses
		// the module itself (§6.8): nothing else to aim.
		return h.submitRefused(ctx, "KERNEL_LOAD_MODULE on a device without modules",
			AppendKernelLoadModule(nil, hostileKernelHandle, 3, k.image, k.imageLen), abi.ErrKernel)
	}
	if !kernelTargets(d.Caps()) {
		return fmt.Errorf("guest: hostile kernel: the device runs modules but not on grids at device addresses (CAPS %#x)", d.Caps())
	}
	if !k.loaded {
		if err := d.Submit(AppendKernelLoadModule(nil, hostileKernelHandle, 3, k.image, k.imageLen)); err != nil {
			return err
		}
		if err := d.Sync(ctx); err != nil {
			return fmt.Errorf("guest: hostile kernel: loading %s: %w", hostileKernelEntry, err)
		}
		k.loaded = true
	}
	var errs uncontained
	if err := errs.add(h.scribbleOwn(ctx)); err != nil {
		return err
	}
	for _, s := range h.strays() {
		if err := errs.add(h.launchStrays(ctx, []stray{s})); err != nil {
			return err
		}
	}
	sweep := h.sweep()
	for len(sweep) > 0 {
		n := hostileBatch
		if !d.Streams() || !h.lost {
			n = 1 // one launch per fence until the context has failed
		}
		n = min(n, len(sweep))
		if err := errs.add(h.launchStrays(ctx, sweep[:n])); err != nil {
			return err
		}
		sweep = sweep[n:]
	}
	var fails []error
	for _, err := range errs {
		if err != nil {
			fails = append(fails, err)
		}
	}
	if len(fails) > 16 {
		fails = append(fails[:16], fmt.Errorf("%w: and %d more launches", ErrNotContained, len(fails)-16))
	}
	return errors.Join(fails...)
}

// setupKernel places the module image and the parameter buffers in
// graphics memory and, on a device with device addresses, reserves its
// own device-local memory.
func (h *Hostile) setupKernel() error {
	d := h.d
	img := ModuleImage(hostileKernelEntry, hostileKernelPTX)
	k := &hostileKernel{imageLen: uint32(len(img))}
	var err error
	if k.image, err = d.Alloc(uint64(len(img))); err == nil {
		if k.params, err = d.Alloc(hostileBatch * hostileKernelStride); err == nil && kernelTargets(d.Caps()) {
			k.readback, err = d.Alloc(hostileOwnBytes)
		}
	}
	if err != nil {
		return fmt.Errorf("guest: hostile kernel memory: %w", err)
	}
	if err := d.WriteGA(k.image, img); err != nil {
		return err
	}
	if kernelTargets(d.Caps()) && d.DeviceAddrs() {
		off, err := d.AllocDevice(hostileOwnBytes)
		if err != nil {
			return fmt.Errorf("guest: hostile kernel local memory: %w", err)
		}
		if k.base, err = d.bus.ReadReg64(abi.RegDeviceAddrBase); err != nil {
			return fmt.Errorf("guest: reading DEVICE_ADDR_BASE: %w", err)
		}
		k.local, k.own = d.LocalMemSize(), k.base+off
	}
	h.kern = k
	return nil
}

// setParams writes slot i's parameter buffer: scribble(dst, words, pattern).
func (h *Hostile) setParams(i int, dst, words uint64, pattern uint32) (uint64, error) {
	var b [hostileKernelParams]byte
	binary.LittleEndian.PutUint64(b[0:], dst)
	binary.LittleEndian.PutUint64(b[8:], words)
	binary.LittleEndian.PutUint32(b[16:], pattern)
	ga := h.kern.params + uint64(i)*hostileKernelStride
	return ga, h.d.WriteGA(ga, b[:])
}

// launchGrid submits one launch of the kernel over words words from dst on
// stream s.
func (h *Hostile) launchGrid(slot int, s uint8, dst, words uint64, pattern uint32) error {
	ga, err := h.setParams(slot, dst, words, pattern)
	if err != nil {
		return err
	}
	cmd := AppendLaunchGrid(nil, hostileKernelHandle, [3]uint32{16, 1, 1}, [3]uint32{256, 1, 1}, 0, ga, hostileKernelParams)
	flags := binary.LittleEndian.Uint16(cmd[2:])
	binary.LittleEndian.PutUint16(cmd[2:], flags|uint16(s)<<abi.CmdStreamShift)
	return h.d.Submit(cmd)
}

// scribbleOwn launches the kernel over its own device-local memory and
// reads it back: the pattern must be there. Once the context has failed,
// the launch must be refused instead.
func (h *Hostile) scribbleOwn(ctx context.Context) error {
	k, d := h.kern, h.d
	if h.lost {
		return h.launchStrays(ctx, []stray{{"scribble over its own local memory in a failed context", k.own}})
	}
	pattern := h.rng.Uint32() | 1
	if err := h.launchGrid(0, 0, k.own, hostileOwnBytes/4, pattern); err != nil {
		return err
	}
	if err := d.Copy(k.readback, k.own, hostileOwnBytes); err != nil {
		return err
	}
	if err := h.refused("scribble over its own local memory", d.Sync(ctx), 0); err != nil {
		return err
	}
	got := make([]byte, hostileOwnBytes)
	if err := d.ReadGA(k.readback, got); err != nil {
		return err
	}
	want := make([]byte, hostileOwnBytes)
	RefFill(want, 0, hostileOwnBytes, pattern)
	i := firstDiff(got, want)
	return h.record("the pattern of its own scribble", i < 0, fmt.Sprintf("byte %d of its local memory is not the pattern", i))
}

// strays are the single addresses outside its own local memory it aims
// at, one launch each.
func (h *Hostile) strays() []stray {
	k := h.kern
	const span = 4 * hostileStrayWords
	return []stray{
		{"just below its local memory", k.base - span},
		{"just above its local memory", k.base + k.local},
		{"across the end of its local memory", k.base + k.local - span/2},
		{"device address 0", 0},
		{"the top of a 49-bit address space", 1<<49 - span},
		{"the top of the address space", ^uint64(0) - span + 1},
		{"graphics-address-like 0x1000", 0x1000},
		{"its sentinel's graphics address", h.sent},
		{"its scratch's graphics address", h.scratch},
	}
}

// sweep is the region's 1 GiB-aligned addresses outside its own local
// memory: all of them the first time, a sample after.
func (h *Hostile) sweep() []stray {
	k := h.kern
	outside := func(a uint64) bool { return a+4*hostileStrayWords <= k.base || a >= k.base+k.local }
	var out []stray
	if !k.swept {
		k.swept = true
		for a := uint64(devRegionLo); a < devRegionHi; a += devRegionStep {
			if outside(a) {
				out = append(out, stray{"a 1 GiB-aligned device address", a})
			}
		}
		return out
	}
	for range hostileSweepSample {
		a := devRegionLo + h.rng.Uint64N((devRegionHi-devRegionLo)/devRegionStep)*devRegionStep
		if outside(a) {
			out = append(out, stray{"a 1 GiB-aligned device address", a})
		}
	}
	return out
}

// launchStrays launches the kernel at each of ss and fences once. Alone,
// a launch goes on stream 0 and must be refused on its own: a KERNEL
// error (found at the fence, or the launch refused in a failed context)
// and 719 on stream 0. Several go on streams 1.. only once the context
// has failed: the device then reports the batch's failure against its
// latest launch (§6.10: which of several outstanding launches failed
// cannot be known), so each counts refused when the fence answers KERNEL
// (or COMMAND) and one of their streams, no other code, holds 719. The
// streams' errors are cleared after.
func (h *Hostile) launchStrays(ctx context.Context, ss []stray) error {
	d := h.d
	stream := func(i int) uint8 {
		if len(ss) == 1 {
			return 0
		}
		return uint8(1 + i)
	}
	for i, s := range ss {
		if err := h.launchGrid(i, stream(i), s.dst, hostileStrayWords, 0x5c5c5c5c); err != nil {
			return err
		}
	}
	err := d.Sync(ctx)
	var de *DeviceError
	if err != nil && !errors.As(err, &de) {
		return fmt.Errorf("guest: hostile kernel: %w", err)
	}
	failed, other := 0, uint32(0)
	for i := range ss {
		id := stream(i)
		code, rerr := d.bus.ReadReg32(abi.RegStreamErr + 4*uint32(id))
		if rerr != nil {
			return fmt.Errorf("guest: reading stream %d's error: %w", id, rerr)
		}
		switch code {
		case 0:
			continue
		case abi.CudaErrorLaunchFailed:
			failed++
		default:
			other = code
		}
		if err := d.ClearStreamError(id); err != nil {
			return err
		}
	}
	ok := failed > 0 && other == 0 && de != nil && de.Status&(abi.ErrKernel|abi.ErrCommand) != 0
	if len(ss) == 1 {
		ok = ok && de.Has(abi.ErrKernel)
	}
	if ok {
		h.lost = true // §6.10: the context has failed, for good
	}
	var errs []error
	for _, s := range ss {
		what := fmt.Sprintf("scribble %s %#x", s.what, s.dst)
		errs = append(errs, h.record(what, ok, fmt.Sprintf("fence answered %v, %d of %d streams hold 719 (another code: %d), want KERNEL and 719", err, failed, len(ss), other)))
	}
	return errors.Join(errs...)
}

// stillAnswers checks a vGPU whose context has failed still answers its
// guest: a fence retires, and a FILL is refused, or done, never hangs.
func (h *Hostile) stillAnswers(ctx context.Context, a Attack) error {
	d := h.d
	if err := d.Fill(h.spare, abi.PageSize, 0x5a5a5a5a); err != nil {
		return err
	}
	err := d.Sync(ctx)
	var de *DeviceError
	if err != nil && !errors.As(err, &de) {
		return fmt.Errorf("guest: hostile: the vGPU no longer answers after %s: %w", a, err)
	}
	if code, _, serr := d.StreamStatus(0); serr != nil {
		return serr
	} else if code != 0 {
		return d.ClearStreamError(0)
	}
	return nil
}
