package precopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// ErrRefused is wrapped by a Source's error when the destination refused
// the migration; the destination's own error text follows it.
var ErrRefused = errors.New("precopy: destination refused the migration")

// srcState is where a Source is in its life.
type srcState int

const (
	srcLive       srcState = iota // created: Precopy (once) and Stop allowed
	srcStopped                    // Stop succeeded: the destination holds the vGPU
	srcFailed                     // Precopy or Stop failed: Rollback is due
	srcRolledBack                 // the source vGPU runs on; the migration is over
	srcClosed                     // tracking stopped; the migration is over
)

var srcStateNames = [...]string{"live", "stopped", "failed", "rolled-back", "closed"}

func (s srcState) String() string { return srcStateNames[s] }

// Source is the sending side of one migration of one vGPU. Precopy and
// Stop run on the caller's goroutine, one after the other; Rollback and
// Close must not run while either does (cancel its ctx and let it return).
type Source struct {
	v     *vgpu.VGPU
	conn  io.ReadWriter
	opts  Options
	log   zerolog.Logger
	tr    *dirty.Tracker
	w     *stream.Writer
	mem   []byte
	local *localState // device-local memory, nil without (local.go)
	ram   ramWrites   // guest RAM the engine wrote since NewSource
	wlog  WriteLog    // the guest's writes (Options.GuestWrites), nil if none; closed with tracking

	// Live-phase batch buffers, reused: no allocation per page.
	pages  []int
	idx    []uint32
	copies []byte
	hashes []uint64

	verdict chan verdictResult    // the verdict reader's one result
	peerErr atomic.Pointer[error] // set by the verdict reader on a refusal or a read error

	sentPages, sentBytes   atomic.Uint64 // page records and stream bytes written so far on the main stream (Sent)
	shardPages, shardBytes atomic.Uint64 // the same on the extra streams (shards.go)
	shardLocal             atomic.Uint64 // device-local page records of those (local_stop.go)

	localBufs [][]byte // the stop phase's read buffers for device-local pages (local_stop.go)

	shards   []*shardOut // AddStreams'; set once, under mu
	token    uint64      // names this migration's streams (stream.Shard)
	lastScan time.Time   // the last live scan's start, or the first pass's end (round.go)

	mu        sync.Mutex // guards the fields below
	state     srcState
	precopied bool
	quiesced  bool // by Stop; Rollback resumes
	bgStop    func() dirty.BackgroundStats
	report    Report
}

type verdictResult struct {
	m   meta
	err error
}

// liveBatch is how many pages the live phase copies, hashes and sends at a
// time: one stream batch.
const liveBatch = stream.DefaultBatchPages

// NewSource starts migrating v over conn: it sends the stream header and
// the begin Meta (name, the vGPU's vgpu.Spec, strategy), starts exact
// tracking of the engine's writes (v.ObserveWrites, held until Rollback or
// Close; a vGPU already being migrated is refused with vgpu.ErrObserved)
// and of its writes into guest RAM (v.ObserveGuestWrites, likewise),
// and starts reading conn for the
// destination's verdict. conn's Read and Write must be usable at the same
// time (as a net.Conn's are); the caller owns conn and closes it after
// Stop, Rollback or Close. Deadlines, when conn has them, are used to
// interrupt blocked calls when a ctx ends or the destination fails.
func NewSource(v *vgpu.VGPU, conn io.ReadWriter, opts Options) (*Source, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	cfg := v.Config()
	log := opts.Log.With().Str("vgpu", cfg.Name).Str("strategy", string(opts.Strategy)).Logger()
	mem := v.Memory()
	tr, err := dirty.New(mem, dirty.Options{Workers: opts.Workers, Log: log, Hasher: opts.Hasher})
	if err != nil {
		return nil, fmt.Errorf("precopy: dirty tracker: %w", err)
	}
	local, err := newLocal(v, tr.Pages())
	if err != nil {
		return nil, err
	}
	// Claim the engine's writes first: one migration of a vGPU at a time.
	if err := v.ObserveWrites(writeHook(tr, local)); err != nil {
		_ = local.close()
		return nil, fmt.Errorf("precopy: %w", err)
	}
	if err := populate(mem, false); err != nil {
		log.Warn().Err(err).Msg("populating the source partition; holes fault in when read")
	}
	wlog, tracking := openWriteLog(v, tr, opts, log)
	w, err := stream.NewWriter(conn)
	if err == nil {
		spec := v.Spec()
		begin := meta{Phase: phaseBegin, Name: cfg.Name, VGPU: &spec, Strategy: opts.Strategy, StateEncoding: stateEncoding}
		if g := v.GPU(); g != nil && g.LocalSize() > 0 {
			begin.DeviceAddrBase = g.DeviceAddrBase()
		}
		err = writeMeta(w, begin)
	}
	if err != nil {
		_ = v.ObserveWrites(nil)
		closeWriteLog(wlog, log)
		_ = local.close()
		return nil, fmt.Errorf("precopy: %w", err)
	}
	s := &Source{
		v: v, conn: conn, opts: opts, log: log, tr: tr, w: w, mem: mem, wlog: wlog, local: local,
		pages:   make([]int, liveBatch),
		idx:     make([]uint32, liveBatch),
		copies:  make([]byte, liveBatch*dirty.PageSize),
		hashes:  make([]uint64, 0, liveBatch),
		verdict: make(chan verdictResult, 1),
		report:  Report{Strategy: opts.Strategy, Tracking: tracking},
	}
	// The engine's writes into guest RAM, which the VMM's migration does
	// not see, are sent at the stop (guestram.go).
	if err := v.ObserveGuestWrites(s.ram.note); err != nil {
		_ = v.ObserveWrites(nil)
		closeWriteLog(wlog, log)
		_ = local.close()
		return nil, fmt.Errorf("precopy: guest RAM writes: %w", err)
	}
	if !opts.NoVerdict {
		go s.readVerdict()
	}
	log.Info().Uint64("mem_size", cfg.MemSize).Int("pages", tr.Pages()).Int("local_pages", local.pages()).Int("workers", opts.Workers).
		Msg("migration source started")
	return s, nil
}

// readVerdict waits for the destination's one message. Before End it can
// only be a refusal: writes are then interrupted so the source stops at
// once rather than sending the rest into a drain.
func (s *Source) readVerdict() {
	m, err := readVerdict(s.conn)
	if err == nil && !m.OK {
		err = fmt.Errorf("%w: %s", ErrRefused, m.Error)
	}
	if err != nil {
		s.peerErr.Store(&err)
		s.eachConn(interruptWrites)
	}
	s.verdict <- verdictResult{m, err}
}

// Sent reports what the Source has written so far: page records (zero
// pages included) and stream bytes. It may be called from any goroutine,
// while Precopy or Stop runs, to show progress.
func (s *Source) Sent() (pages, bytes uint64) {
	return s.sentPages.Load() + s.shardPages.Load(), s.sentBytes.Load() + s.shardBytes.Load()
}

// Pages is the number of pages of the vGPU's memory, device-local memory
// included.
func (s *Source) Pages() int { return s.tr.Pages() + s.local.pages() }

// noteSent publishes the main writer's running totals for Sent; only the
// goroutine writing on it calls it.
func (s *Source) noteSent() {
	st := s.w.Stats()
	s.sentPages.Store(st.Pages)
	s.sentBytes.Store(st.Bytes)
}

// enter moves from srcLive into an operation named op, or says why not.
func (s *Source) enter(op string, precopy bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state != srcLive:
		return fmt.Errorf("precopy: %s on a %s source", op, s.state)
	case precopy && s.precopied:
		return fmt.Errorf("precopy: %s called twice", op)
	}
	if precopy {
		s.precopied = true
	}
	return nil
}

// fail marks the Source failed and returns the error that explains it best:
// the caller's ctx, then the destination's word, then err itself.
func (s *Source) fail(ctx context.Context, phase string, err error) error {
	s.mu.Lock()
	if s.state == srcLive {
		s.state = srcFailed
	}
	s.mu.Unlock()
	switch p := s.peerErr.Load(); {
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		err = &phaseError{phase, fmt.Errorf("%w (%v)", ctx.Err(), err)}
	case p != nil && errors.Is(*p, ErrRefused):
		err = *p
	default:
		err = &phaseError{phase, err}
	}
	s.log.Warn().Err(err).Str("phase", phase).Msg("migration failed")
	return err
}

// phaseError is a Source's failure in one phase: "precopy: <phase>: <what>",
// the package prefix said once.
type phaseError struct {
	phase string
	err   error
}

func (e *phaseError) Error() string {
	return "precopy: " + e.phase + ": " + strings.TrimPrefix(e.err.Error(), "precopy: ")
}

func (e *phaseError) Unwrap() error { return e.err }

// check is the test between batches: ctx, and whether the destination has
// given up.
func (s *Source) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p := s.peerErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Rollback ends a migration that did not complete: tracking stops, the
// source vGPU is resumed if Stop quiesced it, and conn is half-closed (when
// it can be) so the destination reads the end and discards what it built.
// The source's graphics memory was never written. It is idempotent, valid
// after any failure, and also after a successful Stop when the migration
// fails later (the destination must then be discarded by its owner). It
// does nothing after Close.
func (s *Source) Rollback() { s.rollback(true) }

// RollbackStopped is Rollback that leaves a vGPU that Stop quiesced
// quiesced, for an owner that resumes it later (a VMM driving the vfio-user
// migration interface resumes it with its own arc to RUNNING).
func (s *Source) RollbackStopped() { s.rollback(false) }

func (s *Source) rollback(resume bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == srcRolledBack || s.state == srcClosed {
		return
	}
	from := s.state
	s.state = srcRolledBack
	s.stopTrackingLocked()
	resumed := resume && s.quiesced
	if resumed {
		s.v.Resume()
	}
	s.quiesced = false
	s.eachConnLocked(func(c any) {
		interruptReads(c)
		closeWrite(c)
	})
	s.log.Warn().Str("from", from.String()).Bool("resumed", resumed).Msg("migration rolled back; source vGPU runs on")
}

// Close ends the Source after a successful Stop: tracking stops and the
// source vGPU stays quiesced (its owner destroys it). On a Source whose
// migration did not succeed, Close rolls back first.
func (s *Source) Close() {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st != srcStopped && st != srcRolledBack {
		s.Rollback()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != srcClosed {
		s.stopTrackingLocked()
		if err := s.local.close(); err != nil {
			s.log.Warn().Err(err).Msg("closing device-local memory's reader")
		}
		s.state = srcClosed
	}
}

func (s *Source) stopTrackingLocked() {
	s.v.ObserveWrites(nil)
	s.v.ObserveGuestWrites(nil)
	closeWriteLog(s.wlog, s.log)
	s.wlog = nil
	if s.bgStop != nil {
		s.report.Precopy.Background = s.bgStop()
		s.bgStop = nil
	}
}
