package vgpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/mmio"
)

// Spec is what a vGPU is, as its guest sees it: the one description a
// migration carries (the orchestrator's Prepare, the stream's begin Meta
// and State all hold this value), from which the destination creates a
// vGPU the guest cannot tell from the source's. Defaults are applied: every
// field is set.
type Spec struct {
	MemSize    uint64 `json:"mem_size"`
	GTTEntries uint32 `json:"gtt_entries"`
	// Backend is BackendSoftware or BackendCUDA.
	Backend string `json:"backend"`
	// GuestModules: the guest may load its own PTX (CUDA back end only).
	GuestModules bool `json:"guest_modules,omitempty"`
	// LocalMemSize is the device-local memory in bytes (ABI 1.2,
	// docs/device-abi.md §1.3); 0, the default, is the device without it.
	LocalMemSize uint64 `json:"local_mem_size,omitempty"`
	// Caps is the CAPS register the guest reads (docs/device-abi.md §3).
	Caps uint32 `json:"caps"`
}

// ErrSpec reports a Spec this gmigd cannot provide, or a vGPU that is not
// the one a Spec describes.
var ErrSpec = errors.New("vgpu: cannot provide the vGPU described")

// Spec returns v's description.
func (v *VGPU) Spec() Spec {
	return Spec{
		MemSize:      v.cfg.MemSize,
		GTTEntries:   v.cfg.GTTEntries,
		Backend:      v.cfg.Backend,
		GuestModules: v.cfg.GuestModules,
		LocalMemSize: v.cfg.LocalMemSize,
		Caps:         v.cfg.caps(),
	}
}

// caps is the CAPS value a vGPU of c presents: every vGPU's bits and its
// back end's (c has its defaults applied).
func (c Config) caps() uint32 {
	caps := uint32(mmio.DefaultCaps)
	if c.GuestModules {
		caps |= abi.CapModules
	}
	if c.LocalMemSize > 0 {
		// The CUDA-shaped device: local memory, at device addresses
		// (ABI 1.3), and streams together.
		caps |= abi.CapLocalMem | abi.CapStreams | abi.CapDeviceAddr
	}
	if c.GuestModules && c.LocalMemSize > 0 && c.Backend == BackendCUDA {
		// LAUNCH_GRID (ABI 1.3): guest modules on device-local memory.
		caps |= abi.CapLaunchGrid
	}
	return caps
}

// Config returns the Config that creates, under name, the vGPU s
// describes. A Spec this gmigd cannot provide is refused with ErrSpec
// saying why: a field left unset, a back end it does not know, guest
// modules on a back end without them, a CAPS value its vGPUs do not
// present. Whether the back end's device opens here is New's to find.
func (s Spec) Config(name string) (Config, error) {
	if s.MemSize == 0 || s.GTTEntries == 0 || s.Backend == "" {
		return Config{}, fmt.Errorf("%w: incomplete spec %+v", ErrSpec, s)
	}
	c, err := Config{Name: name, MemSize: s.MemSize, GTTEntries: s.GTTEntries,
		Backend: s.Backend, GuestModules: s.GuestModules, LocalMemSize: s.LocalMemSize}.withDefaults()
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	if caps := c.caps(); caps != s.Caps {
		return Config{}, fmt.Errorf("%w: CAPS %#x, a %s vGPU here presents %#x", ErrSpec, s.Caps, s.Backend, caps)
	}
	return c, nil
}

// Is reports, as an error wrapping ErrSpec that names every difference,
// whether v is not the vGPU s describes; nil if it is.
func (v *VGPU) Is(s Spec) error {
	have := v.Spec()
	if have == s {
		return nil
	}
	var d []string
	add := func(what string, want, got any) {
		if want != got {
			d = append(d, fmt.Sprintf("%s %v (here %v)", what, want, got))
		}
	}
	add("memory size", s.MemSize, have.MemSize)
	add("GTT entries", s.GTTEntries, have.GTTEntries)
	add("back end", s.Backend, have.Backend)
	add("guest modules", s.GuestModules, have.GuestModules)
	add("local memory size", s.LocalMemSize, have.LocalMemSize)
	add("CAPS", fmt.Sprintf("%#x", s.Caps), fmt.Sprintf("%#x", have.Caps))
	return fmt.Errorf("%w: %s", ErrSpec, strings.Join(d, ", "))
}
