package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/abi"
)

// A hostile guest program (docs/security.md, "Hostile guests"): it drives
// its own vGPU through the ABI as a malicious guest would — GTT entries
// naming pages outside its partition, DMA outside guest RAM, oversized,
// wrapping and overlapping copies, malformed and endless command streams,
// interrupt storms, resets in the middle of a batch, guest kernels that
// write at every device address they can name — and checks that the
// device refuses or contains each attempt: the error registers say so,
// refused GTT entries keep their value, and nothing it owns changed other
// than as the ABI says (a sentinel area no attack targets stays intact, a
// scratch area matches a reference model). It cannot see other vGPUs; the
// tests that run it check those.

// Attack is one class of hostile behaviour.
type Attack string

// The attacks, in the order a Hostile takes them.
const (
	AttackGTT   Attack = "gtt"   // out-of-partition and malformed GTT entries, entries past GTT_ENTRIES
	AttackDMA   Attack = "dma"   // DMA outside guest RAM, wrapping DMA ranges, DMA to unmapped graphics memory
	AttackCopy  Attack = "copy"  // oversized, wrapping, unmapped, overlapping and aliased COPY and FILL
	AttackRing  Attack = "ring"  // malformed commands, garbage, bad doorbells, bad rings, command storms
	AttackIRQ   Attack = "irq"   // interrupt storms, mask toggling, writes to read-only registers
	AttackReset Attack = "reset" // CONTROL.RESET in the middle of a running batch
	// AttackKernel loads a guest module whose kernel stores wherever it is
	// pointed and launches it over its own device-local memory and over
	// every device address outside it (hostile_kernel.go).
	AttackKernel Attack = "kernel"
)

// Attacks lists the attacks every device takes.
var Attacks = []Attack{AttackGTT, AttackDMA, AttackCopy, AttackRing, AttackIRQ, AttackReset}

// AttacksFor lists every attack a device with CAPS caps takes: Attacks,
// and AttackKernel last where guest modules run on grids at device
// addresses (abi.CapModules, abi.CapLaunchGrid, abi.CapDeviceAddr). Last,
// because a kernel that faults ends the vGPU's GPU context for good
// (docs/device-abi.md §6.10).
func AttacksFor(caps uint32) []Attack {
	out := slices.Clone(Attacks)
	if kernelTargets(caps) {
		out = append(out, AttackKernel)
	}
	return out
}

// ParseAttacks reads a comma-separated list of attacks; "all" (or "")
// gives nil: every attack the device takes (AttacksFor).
func ParseAttacks(s string) ([]Attack, error) {
	if s == "" || s == "all" {
		return nil, nil
	}
	known := append(slices.Clone(Attacks), AttackKernel)
	var out []Attack
	for _, w := range strings.Split(s, ",") {
		a := Attack(strings.TrimSpace(w))
		if a == "all" {
			return nil, nil
		}
		if !slices.Contains(known, a) {
			return nil, fmt.Errorf("guest: unknown attack %q (want all or a list of %v)", a, known)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// ErrNotContained is wrapped by the error of an attempt the device did not
// refuse or contain.
var ErrNotContained = errors.New("guest: hostile attempt not refused")

// HostileConfig shapes a Hostile.
type HostileConfig struct {
	Seed    int64
	Attacks []Attack // nil: every attack the device takes (AttacksFor)
	// Storm is how long a command storm keeps the ring full (default
	// 20 ms; the ring attack runs one per step).
	Storm time.Duration
}

// HostileStats count what a Hostile did; Stats may be read from any
// goroutine.
type HostileStats struct {
	Steps    uint64            // attacks run
	ByAttack map[Attack]uint64 // steps per attack
	Attempts uint64            // hostile attempts made
	Refused  uint64            // attempts refused or contained, as they must be
	Failures uint64            // attempts that were not (each returned by Step)
	Resets   uint64            // device resets issued
	Storms   uint64            // command storms run
	Commands uint64            // commands submitted by storms
}

// Sizes of the hostile's own graphics memory.
const (
	hostileScratch  = 64 << 10 // the area copies and storms work in, with a model
	hostileSentinel = 16 << 10 // seeded bytes no attack targets
)

// Hostile is the hostile program on one Driver. Like the Driver, it is
// owned by one goroutine.
type Hostile struct {
	d       *Driver
	cfg     HostileConfig
	rng     *rand.Rand
	gateFn  func(context.Context) error
	next    int
	scratch uint64 // graphics address of the scratch area
	model   []byte // what the scratch area must hold
	spare   uint64 // graphics address of a page whose GTT entry attacks play with
	sent    uint64 // graphics address of the sentinel area
	sentRef []byte
	kern    *hostileKernel // the kernel attack's set-up, once it has run
	// lost: a guest kernel failed, which fails the vGPU's GPU context
	// until the vGPU is destroyed (docs/device-abi.md §6.10); from then
	// on the program runs the kernel attack alone, every launch of which
	// must be refused.
	lost bool

	mu      sync.Mutex
	stats   HostileStats
	stepped chan struct{} // closed and replaced as each attack begins (WaitSteps)
}

// NewHostile sets up the hostile program on d: it allocates its scratch,
// sentinel and spare graphics memory and fills them.
func NewHostile(d *Driver, cfg HostileConfig) (*Hostile, error) {
	if cfg.Attacks == nil {
		cfg.Attacks = AttacksFor(d.Caps())
	}
	if cfg.Storm == 0 {
		cfg.Storm = 20 * time.Millisecond
	}
	h := &Hostile{
		d: d, cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x686f7374)), // "host"
		model: make([]byte, hostileScratch), sentRef: make([]byte, hostileSentinel),
		stats: HostileStats{ByAttack: map[Attack]uint64{}},
	}
	var err error
	if h.scratch, err = d.Alloc(hostileScratch); err == nil {
		if h.sent, err = d.Alloc(hostileSentinel); err == nil {
			h.spare, err = d.Alloc(abi.PageSize)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("guest: hostile memory: %w", err)
	}
	seededBytes(h.sentRef, uint64(cfg.Seed)^0x5e47)
	if err := d.WriteGA(h.sent, h.sentRef); err != nil {
		return nil, err
	}
	if err := h.randomize(); err != nil {
		return nil, err
	}
	return h, nil
}

// SetGate installs a function called before each attack; it may block (a
// simulator pauses the guest there). Its error ends Step.
func (h *Hostile) SetGate(g func(context.Context) error) { h.gateFn = g }

// Attacks lists the attacks h takes in turn.
func (h *Hostile) Attacks() []Attack { return slices.Clone(h.cfg.Attacks) }

// Stats returns the counters.
func (h *Hostile) Stats() HostileStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.ByAttack = make(map[Attack]uint64, len(h.stats.ByAttack))
	for k, v := range h.stats.ByAttack {
		s.ByAttack[k] = v
	}
	return s
}

// WaitSteps returns once n attacks have begun (HostileStats.Steps), or
// with ctx's error; any goroutine may wait while another runs the program.
func (h *Hostile) WaitSteps(ctx context.Context, n uint64) error {
	for {
		h.mu.Lock()
		if h.stats.Steps >= n {
			h.mu.Unlock()
			return nil
		}
		if h.stepped == nil {
			h.stepped = make(chan struct{})
		}
		ch := h.stepped
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("guest: waiting for %d hostile steps: %w", n, ctx.Err())
		}
	}
}

func (h *Hostile) count(f func(s *HostileStats)) {
	h.mu.Lock()
	f(&h.stats)
	h.mu.Unlock()
}

// Step runs the next attack, then checks the device contained it: the
// sentinel and scratch areas hold what they must and the vGPU still serves
// the hostile. An error wrapping ErrNotContained is an attempt that was
// not refused (the program may go on); any other error means the device
// stopped serving it or the transport failed.
func (h *Hostile) Step(ctx context.Context) error {
	if h.gateFn != nil {
		if err := h.gateFn(ctx); err != nil {
			return err
		}
	}
	a := h.cfg.Attacks[h.next%len(h.cfg.Attacks)]
	h.next++
	if h.lost {
		a = AttackKernel // the context is gone: nothing else runs (hostile_kernel.go)
	}
	h.mu.Lock()
	h.stats.Steps++
	h.stats.ByAttack[a]++
	if h.stepped != nil {
		close(h.stepped)
	}
	h.stepped = make(chan struct{})
	h.mu.Unlock()
	var err error
	switch a {
	case AttackGTT:
		err = h.attackGTT()
	case AttackDMA:
		err = h.attackDMA(ctx)
	case AttackCopy:
		err = h.attackCopy(ctx)
	case AttackRing:
		err = h.attackRing(ctx)
	case AttackIRQ:
		err = h.attackIRQ(ctx)
	case AttackReset:
		err = h.attackReset(ctx)
	case AttackKernel:
		err = h.attackKernel(ctx)
	}
	if err != nil && !errors.Is(err, ErrNotContained) {
		return fmt.Errorf("guest: hostile %s: %w", a, err)
	}
	return errors.Join(err, h.contained(ctx, a))
}

// Run runs attacks until d has passed or ctx ends, going on after attempts
// that were not refused; it returns them all, or the error that stopped it.
func (h *Hostile) Run(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	var fails []error
	for time.Now().Before(end) && ctx.Err() == nil {
		err := h.Step(ctx)
		switch {
		case err == nil:
		case errors.Is(err, ErrNotContained) && len(fails) < 16:
			fails = append(fails, err)
		case errors.Is(err, ErrNotContained):
		default:
			return errors.Join(append(fails, err)...)
		}
	}
	return errors.Join(fails...)
}

// refused records an attempt: err must be a device error with every bit of
// want set (want 0: no error, the attempt was valid). An error that is not
// the device's (the transport failed, ctx ended) is returned as it is.
func (h *Hostile) refused(what string, err error, want uint32) error {
	var de *DeviceError
	if err != nil && !errors.As(err, &de) {
		return fmt.Errorf("guest: hostile: %s: %w", what, err)
	}
	// On a device with streams (CAPS bit 5) a failed command also sets
	// its stream's error, and the stream skips its commands until the
	// guest clears it (docs/device-abi.md §5.1): the next attempt would
	// be skipped, not refused. The hostile program submits on stream 0.
	if de != nil && h.d.Caps()&abi.CapStreams != 0 {
		if cerr := h.d.ClearStreamError(0); cerr != nil {
			return fmt.Errorf("guest: hostile: %s: clearing stream 0's error: %w", what, cerr)
		}
	}
	ok := de != nil && de.Has(want)
	if want == 0 {
		ok = err == nil
	}
	return h.record(what, ok, fmt.Sprintf("got %v, want device error %s", err, ErrBitNames(want)))
}

// submitRefused submits one command, waits, and expects want.
func (h *Hostile) submitRefused(ctx context.Context, what string, cmd []byte, want uint32) error {
	if err := h.d.Submit(cmd); err != nil {
		return err
	}
	return h.refused(what, h.d.Sync(ctx), want)
}

// contained checks what attack a left behind.
func (h *Hostile) contained(ctx context.Context, a Attack) error {
	if err := h.d.CheckErrors(); err != nil {
		var de *DeviceError
		if !errors.As(err, &de) {
			return err
		}
	}
	var errs []error
	got := make([]byte, hostileSentinel)
	if err := h.d.ReadGA(h.sent, got); err != nil {
		return err
	}
	if i := firstDiff(got, h.sentRef); i >= 0 {
		errs = append(errs, fmt.Errorf("%w: after %s the sentinel at %#x changed", ErrNotContained, a, h.sent+uint64(i)))
	}
	got = make([]byte, hostileScratch)
	if err := h.d.ReadGA(h.scratch, got); err != nil {
		return err
	}
	if i := firstDiff(got, h.model); i >= 0 {
		errs = append(errs, fmt.Errorf("%w: after %s scratch %#x is %#02x, model %#02x", ErrNotContained, a, h.scratch+uint64(i), got[i], h.model[i]))
		copy(h.model, got) // report it once
	}
	if h.lost {
		// The context failed: the vGPU answers, refusing device work.
		return errors.Join(append(errs, h.stillAnswers(ctx, a))...)
	}
	// The vGPU still serves its guest: a FILL of its spare page lands.
	pattern := h.rng.Uint32() | 1
	if err := h.d.Fill(h.spare, abi.PageSize, pattern); err != nil {
		return err
	}
	if err := h.d.Sync(ctx); err != nil {
		return fmt.Errorf("guest: hostile: the device no longer serves after %s: %w", a, err)
	}
	page := make([]byte, abi.PageSize)
	if err := h.d.ReadGA(h.spare, page); err != nil {
		return err
	}
	want := make([]byte, abi.PageSize)
	RefFill(want, 0, abi.PageSize, pattern)
	if !bytes.Equal(page, want) {
		errs = append(errs, fmt.Errorf("guest: hostile: after %s a FILL of its own page did not land", a))
	}
	return errors.Join(errs...)
}

// randomize stores random bytes over the scratch area and its model.
func (h *Hostile) randomize() error {
	for i := range h.model {
		h.model[i] = byte(h.rng.Uint32())
	}
	return h.d.WriteGA(h.scratch, h.model)
}

// reset resets the device and brings the driver back up.
func (h *Hostile) reset() error {
	h.count(func(s *HostileStats) { s.Resets++ })
	return h.d.Reset()
}

// Scratch, Sentinel and Spare are the graphics addresses of the hostile's
// own allocations (a caller that is done with it may free them).
func (h *Hostile) Scratch() uint64  { return h.scratch }
func (h *Hostile) Sentinel() uint64 { return h.sent }
func (h *Hostile) Spare() uint64    { return h.spare }
