package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// Errors of the engine's control surface. Callers branch on them with
// errors.Is; the mmio layer maps ErrBadRing and ErrBadDoorbell to
// ERR_STATUS bits (docs/device-abi.md §4).
var (
	ErrBadRing     = errors.New("engine: invalid ring base or size")
	ErrBadDoorbell = errors.New("engine: invalid doorbell")
	ErrNotQuiesced = errors.New("engine: not quiesced")
	ErrBadState    = errors.New("engine: invalid saved state")
)

// Config is what an engine runs against. Backend and GTT are required; a nil
// RAM makes every DMA fault, a nil Events drops reports.
type Config struct {
	Backend Backend
	GTT     Resolver
	RAM     GuestMemory
	Events  Events
	Log     zerolog.Logger
	// Streams turns on stream ids in command headers, per-stream fences and
	// errors (docs/device-abi.md §5.1, ABI 1.2, abi.CapStreams). Without
	// it the stream bits are reserved, as in ABI 1.1.
	Streams bool
	// Local is the host extent (pool offsets) of the vGPU's device-local
	// memory (docs/device-abi.md §1.3); Len 0 without. Where the back end
	// reports a DeviceAddrBase (ABI 1.3, CapDeviceAddr), command operands
	// that are device addresses resolve into it (§1.4, resolve.go).
	Local gtt.Extent
}

// Regs is a snapshot of the engine's registers (docs/device-abi.md §3).
type Regs struct {
	RingBase  uint64
	RingSize  uint32
	Head      uint32 // ring offset of the next command to fetch
	Tail      uint32 // last tail accepted by Doorbell
	Enabled   bool
	Busy      bool // Head != Tail
	FenceDone uint64
	// CmdsDone counts retired commands since reset, failed ones included;
	// a dropped batch counts once (the command that failed).
	CmdsDone uint64
}

// regs is the register state behind Regs; gen counts ring restarts so that
// a command in flight across a re-enable does not move the new head.
type regs struct {
	ringBase   uint64
	ringSize   uint32
	head, tail uint32
	enabled    bool
	fenceDone  uint64
	cmdsDone   uint64
	gen        uint64
	// streams is each stream's fence and error (ABI 1.2, Config.Streams;
	// stream.go): a reset zeroes them with the rest.
	streams [abi.MaxStreams]streamReg
}

// ctlReq asks the engine goroutine to park (quiesce) or unpark (resume); it
// closes done when that is so.
type ctlReq struct {
	quiesce bool
	fn      func() // if set: run between commands instead, the parking untouched
	done    chan struct{}
}

// Engine is the command processor of one vGPU (docs/device-abi.md §5–7).
// One goroutine (started by Start) fetches and executes commands; it takes
// its input through one select: doorbell wake-ups, quiesce/resume requests
// and stop. Register reads and writes go through mu, which is never held
// while a command executes, so MMIO never waits for a kernel.
//
// Per command, reports go out in this order: Events.Wrote (the host extents
// the command wrote — for a command that failed part way, every extent it
// may have written), then FENCE_DONE is updated and Events.FenceCompleted
// called, or Events.Faulted; then the head advances and CmdsDone counts it.
// A fault's Opcode is the header's opcode whenever the header could be
// read, even an unknown one; 0 when fetching the header faulted.
//
// Lock order: mu is a leaf; it is never held while calling the Backend,
// the Resolver, guest memory or Events.
type Engine struct {
	cfg Config
	log zerolog.Logger

	wake chan struct{} // doorbells and ring changes, capacity 1
	ctl  chan ctlReq   // quiesce and resume
	stop chan struct{}
	done chan struct{}

	closeOnce sync.Once

	mu        sync.Mutex
	r         regs
	kernels   map[uint32]uint32      // handle -> kind
	modules   map[uint32]Module      // guest modules (kind abi.KernelModule), by handle
	layouts   map[uint32]paramLayout // their PTX parameter layouts, read once (launchgrid.go)
	quiesced  bool                   // parked between commands
	executing bool                   // a command is between fetch and retire
	started   bool
	running   bool // the goroutine is alive
	closed    bool
	idle      chan struct{} // closed and cleared when the engine goes idle; nil if nobody waits

	// Owned by the engine goroutine.
	cmd      [abi.CmdMaxSize]byte
	stage    []byte                    // DMA staging
	xs       []gtt.Extent              // scratchResolve's extents
	params   [abi.LaunchParamsMax]byte // a LAUNCH_GRID's parameter buffer
	lastGrid gridLaunch                // the latest LAUNCH_GRID (launchgrid.go)
	unsynced bool                      // a command wrote graphics memory since the last Backend.Sync
}

// New returns an engine over cfg; it runs nothing until Start.
func New(cfg Config) *Engine {
	if cfg.Events == nil {
		cfg.Events = nopEvents{}
	}
	return &Engine{
		cfg:     cfg,
		log:     cfg.Log.With().Str("backend", cfg.Backend.Name()).Logger(),
		wake:    make(chan struct{}, 1),
		ctl:     make(chan ctlReq, 4),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		kernels: make(map[uint32]uint32),
		modules: make(map[uint32]Module),
		layouts: make(map[uint32]paramLayout),
	}
}

// Start starts the goroutine that owns execution. It does nothing after the
// first call or after Close.
func (e *Engine) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.closed {
		return
	}
	e.started, e.running = true, true
	go e.run()
}

// Close stops the engine goroutine after the command in flight and waits
// for it. It is idempotent.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		started := e.started
		e.mu.Unlock()
		close(e.stop)
		if started {
			<-e.done
		}
	})
}

// SetRingBase sets RING_BASE; ignored while the ring is enabled (§3).
func (e *Engine) SetRingBase(ga uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.r.enabled {
		e.r.ringBase = ga
	}
}

// SetRingSize sets RING_SIZE; ignored while the ring is enabled (§3).
func (e *Engine) SetRingSize(n uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.r.enabled {
		e.r.ringSize = n
	}
}

// validRing checks a ring base and size (docs/device-abi.md §3, §5).
func validRing(base uint64, size uint32) error {
	switch {
	case base%abi.PageSize != 0:
		return fmt.Errorf("%w: base %#x not page aligned", ErrBadRing, base)
	case size < abi.RingMinSize || size > abi.RingMaxSize || size&(size-1) != 0:
		return fmt.Errorf("%w: size %#x (want a power of two in %#x..%#x)", ErrBadRing, size, abi.RingMinSize, abi.RingMaxSize)
	case base+uint64(size) < base:
		return fmt.Errorf("%w: base %#x + size %#x overflows", ErrBadRing, base, size)
	}
	return nil
}

// SetEnabled sets or clears CONTROL.ENABLE (§3). Setting it checks the ring
// (an error wraps ErrBadRing and leaves the ring disabled) and zeroes head
// and tail; setting it while already set does nothing. Clearing it stops
// fetching after the command in flight.
func (e *Engine) SetEnabled(on bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if on == e.r.enabled {
		return nil
	}
	if !on {
		e.r.enabled = false
		e.log.Debug().Uint32("head", e.r.head).Uint32("tail", e.r.tail).Msg("engine: ring disabled")
		e.notifyIdleLocked()
		return nil
	}
	if err := validRing(e.r.ringBase, e.r.ringSize); err != nil {
		e.log.Debug().Err(err).Msg("engine: ring enable refused")
		return err
	}
	e.r.enabled = true
	e.r.head, e.r.tail = 0, 0
	e.r.gen++
	e.log.Debug().Uint64("base", e.r.ringBase).Uint32("size", e.r.ringSize).Msg("engine: ring enabled")
	return nil
}

// Doorbell accepts a new tail (§3 DOORBELL): it must be 8-byte aligned and
// below RING_SIZE, and the ring enabled; otherwise the error wraps
// ErrBadDoorbell and nothing changes. It records the tail and wakes the
// engine; it never waits for a command. While quiesced the tail is recorded
// and runs after Resume.
func (e *Engine) Doorbell(tail uint32) error {
	e.mu.Lock()
	switch {
	case !e.r.enabled:
		e.mu.Unlock()
		return fmt.Errorf("%w: ring disabled", ErrBadDoorbell)
	case tail%abi.CmdAlign != 0 || tail >= e.r.ringSize:
		size := e.r.ringSize
		e.mu.Unlock()
		return fmt.Errorf("%w: tail %#x (ring of %#x bytes, %d-byte aligned)", ErrBadDoorbell, tail, size, abi.CmdAlign)
	}
	e.r.tail = tail
	e.mu.Unlock()
	e.poke()
	return nil
}

// poke wakes the engine goroutine without blocking.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Regs returns a snapshot of the registers; safe from any goroutine.
func (e *Engine) Regs() Regs {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Regs{
		RingBase:  e.r.ringBase,
		RingSize:  e.r.ringSize,
		Head:      e.r.head,
		Tail:      e.r.tail,
		Enabled:   e.r.enabled,
		Busy:      e.r.head != e.r.tail,
		FenceDone: e.r.fenceDone,
		CmdsDone:  e.r.cmdsDone,
	}
}

// Quiesce stops taking work: the command in flight finishes, doorbells are
// still recorded, and Quiesce returns once the engine is parked between
// commands. On an engine not running it just marks it parked.
func (e *Engine) Quiesce() { e.control(true)() }

// Resume undoes Quiesce; recorded work continues.
func (e *Engine) Resume() { e.control(false)() }

// control sends a park/unpark request without waiting and returns the wait.
// Tests use the split to quiesce deterministically from inside a command.
func (e *Engine) control(quiesce bool) (wait func()) {
	set := func() { // no engine goroutine: nothing else uses the back end
		e.mu.Lock()
		e.quiesced = quiesce
		e.mu.Unlock()
		if quiesce {
			e.syncBackend()
		}
	}
	e.mu.Lock()
	running := e.running
	e.mu.Unlock()
	if !running {
		set()
		return func() {}
	}
	req := ctlReq{quiesce: quiesce, done: make(chan struct{})}
	select {
	case e.ctl <- req:
	case <-e.done:
		set()
		return func() {}
	}
	return func() {
		select {
		case <-req.done:
		case <-e.done:
			set()
		}
	}
}

// between runs fn with no command executing: on the engine goroutine,
// between two commands, or here when there is none (nothing else uses the
// back end then).
func (e *Engine) between(fn func()) {
	e.mu.Lock()
	running := e.running
	e.mu.Unlock()
	if !running {
		fn()
		return
	}
	req := ctlReq{fn: fn, done: make(chan struct{})}
	select {
	case e.ctl <- req:
	case <-e.done:
		fn()
		return
	}
	select {
	case <-req.done:
	case <-e.done:
		// Stopped: it ran fn before stopping, or never took the request.
		select {
		case <-req.done:
		default:
			fn()
		}
	}
}

// WaitIdle returns when nothing is executing and there is no pending work
// (head == tail, or the ring is disabled), or with ctx's error. Pending work
// on a quiesced engine is not idle.
func (e *Engine) WaitIdle(ctx context.Context) error {
	for {
		e.mu.Lock()
		if e.idleLocked() {
			e.mu.Unlock()
			return nil
		}
		if e.idle == nil {
			e.idle = make(chan struct{})
		}
		ch := e.idle
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("engine: waiting for idle: %w", ctx.Err())
		}
	}
}

func (e *Engine) idleLocked() bool {
	return !e.executing && (!e.r.enabled || e.r.head == e.r.tail)
}

// notifyIdleLocked wakes WaitIdle callers if the engine is idle.
func (e *Engine) notifyIdleLocked() {
	if e.idle != nil && e.idleLocked() {
		close(e.idle)
		e.idle = nil
	}
}

// pendingLocked reports whether the goroutine has a command to run.
func (e *Engine) pendingLocked() bool {
	return !e.quiesced && e.r.enabled && e.r.head != e.r.tail
}

// closedChan is always ready; it stands for "a command is waiting".
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// run is the engine goroutine.
func (e *Engine) run() {
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
		close(e.done)
	}()
	e.log.Debug().Msg("engine: started")
	for {
		// Control first: a request that arrived during the last command is
		// honoured before the next one starts.
		select {
		case <-e.stop:
			e.log.Debug().Msg("engine: stopped")
			return
		case req := <-e.ctl:
			e.handle(req)
			continue
		default:
		}
		e.mu.Lock()
		var work <-chan struct{}
		if e.pendingLocked() {
			work = closedChan
		}
		e.mu.Unlock()
		select {
		case <-e.stop:
			e.log.Debug().Msg("engine: stopped")
			return
		case req := <-e.ctl:
			e.handle(req)
		case <-e.wake:
		case <-work:
			e.step()
		}
	}
}

func (e *Engine) handle(req ctlReq) {
	if req.fn != nil {
		req.fn()
		close(req.done)
		return
	}
	e.mu.Lock()
	e.quiesced = req.quiesce
	e.mu.Unlock()
	if req.quiesce {
		e.syncBackend()
	}
	close(req.done)
}

// syncBackend makes everything retired commands wrote visible in host
// memory (a GPU back end keeps outputs on the device between fences), so a
// quiesced engine's graphics memory can be read, hashed and migrated.
func (e *Engine) syncBackend() {
	if err := e.sync(); err != nil {
		e.log.Error().Err(err).Msg("engine: back end sync at quiesce failed")
	}
}

type nopEvents struct{}

func (nopEvents) FenceCompleted(uint64, bool) {}
func (nopEvents) Faulted(Fault)               {}
func (nopEvents) Wrote([]gtt.Extent)          {}
func (nopEvents) KernelLoaded(uint32, uint32) {}
func (nopEvents) KernelUnloaded(uint32)       {}
