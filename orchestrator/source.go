package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// Errors callers branch on.
var (
	// ErrRolledBack wraps every failure after which the source runs on:
	// the VM and its vGPU are live here, the destination kept nothing.
	ErrRolledBack = errors.New("orchestrator: migration failed; the VM runs on at the source")
	// ErrNotResumed is a rollback whose last step failed: the source's
	// VMM did not resume the VM (it exited — a guest that powered itself
	// off ends its QEMU — or stopped answering). The destination kept
	// nothing and the source vGPU runs on, but no copy of the VM runs.
	ErrNotResumed = errors.New("orchestrator: migration failed and the VM could not be resumed at the source")
	// ErrOutcomeUnknown is a commit whose outcome the source could not
	// learn: the destination did not answer and could not be asked. The
	// VM stays paused here and its vGPU quiesced — it may be running at
	// the destination, and two live copies must never exist. Ask the
	// destination (Resolve) once it can be reached.
	ErrOutcomeUnknown = errors.New("orchestrator: migration outcome unknown; the VM stays paused at the source")
	// ErrDestinationGaveUp is wrapped, with the destination's reason, in
	// a rollback the destination started: it failed after ready and said
	// why before it discarded.
	ErrDestinationGaveUp = errors.New("orchestrator: the destination gave up")
)

// Source is one outgoing migration: a vGPU, the VM that uses it, and the
// destination gmigd.
type Source struct {
	VGPU  *vgpu.VGPU
	VM    SourceVM
	Beats *Heartbeats // the vGPU's heartbeats on this host; nil: none
	// Peer is the destination gmigd's migration address (host:port).
	Peer      string
	Transport Transport // nil: TCP
	// VMKind and VMSpec describe the VM for the destination's Host
	// (Prepare).
	VMKind string
	VMSpec json.RawMessage
	// Name is the vGPU's name at the destination ("" keeps its own).
	Name     string
	Precopy  precopy.Options
	Timeouts Timeouts
	// Progress, if set, receives snapshots while the migration runs (from
	// another goroutine; calls do not overlap).
	Progress func(Progress)
	// OnResolved, if set, makes a migration that ends with
	// ErrOutcomeUnknown go on asking the destination in the background
	// until it answers; then the source is released (the destination runs
	// the VM: destinationRuns true) or rolled back (it does not: the VM
	// runs here again), and OnResolved is called with the answer.
	OnResolved func(destinationRuns bool)
	// Control, if set, is the owner's handle on the migration: its ID,
	// cancel before the commit, bandwidth (job.go). nil: none.
	Control *Control
	// MaxDowntime, if positive, bounds the estimated stop phase: before
	// the VMM's migration (which may pause the VM at any moment), extra
	// pre-copy rounds run until the estimate fits, or the migration rolls
	// back with ErrDowntime (estimate.go).
	MaxDowntime time.Duration
	Log         zerolog.Logger
}

// Migrate moves the VM and its vGPU to the destination (doc.go, "The
// sequence"). On success the VM runs at the destination and has been
// released here (SourceVM.Release); the caller destroys the source vGPU.
// On an error that wraps ErrRolledBack the VM and vGPU run on here; on
// ErrNotResumed the vGPU runs on here and the VM runs nowhere (its VMM
// could not resume it). On ErrOutcomeUnknown the VM is paused and the
// vGPU quiesced: the caller keeps both until Resolve says which side owns
// the VM.
func Migrate(ctx context.Context, s Source) (Report, error) {
	if s.Control == nil {
		s.Control = NewControl(0)
	}
	m := &outgoing{Source: s, id: s.Control.ID(), start: time.Now()}
	if m.Transport == nil {
		m.Transport = TCP{}
	}
	m.Timeouts = m.Timeouts.withDefaults()
	m.log = s.Log.With().Str("migration", m.id).Str("vgpu", s.VGPU.Name()).Str("peer", s.Peer).Logger()
	m.rep = Report{ID: m.id, VGPU: s.VGPU.Name(), Strategy: s.Precopy.Strategy}
	if m.rep.Strategy == "" {
		m.rep.Strategy = precopy.OneShot
	}
	m.progress = newReporter(m.id, s.Progress, s.VM.Progress)
	defer m.progress.close()
	err := m.run(ctx)
	m.rep.Total = time.Since(m.start)
	if err != nil {
		return m.rep, err
	}
	m.progress.enter(PhaseDone)
	m.log.Info().Dur("downtime", m.rep.Downtime).Dur("guest_gap", m.rep.GuestGap).
		Int("stop_pages", m.rep.Precopy.Stop.DirtyPages).Msg("migration done")
	return m.rep, nil
}

// outgoing is one Migrate's state.
type outgoing struct {
	Source
	id       string
	start    time.Time
	log      zerolog.Logger
	rep      Report
	progress *reporter

	ctl      net.Conn
	ctlIn    chan ctlMsg // what the destination says after ready, read by one goroutine
	data     net.Conn
	extra    []net.Conn // the stop phase's extra streams (streams.go)
	streams  int        // the stop phase's streams, as the destination agreed
	src      *precopy.Source
	instance string // the destination gmigd's run
	times    sourceTimes
	sw       *switchover // the VMM's, beside the stop phase
}

func (m *outgoing) run(ctx context.Context) error {
	defer func() {
		for _, c := range append([]net.Conn{m.ctl, m.data}, m.extra...) {
			if c != nil {
				c.Close()
			}
		}
	}()
	// Up to the commit point the owner may cancel (Control.Cancel): jctx
	// ends, and the migration rolls back as on any failure.
	jctx, unbind := m.Control.bind(ctx)
	defer unbind()
	m.progress.enter(PhasePrepare)
	incoming, err := m.prepare(jctx)
	if err != nil {
		return m.rollback(ctx, "prepare", cancelCause(jctx, err))
	}
	// Until the commit the destination says nothing on the control
	// connection but why it gave up: that, or its end (a dead gmigd, a
	// cut link), stops the migration at once, whatever phase is waiting.
	pctx, stopWatch := m.watchControl(jctx)
	// The VMM's switchover starts once the stop phase has quiesced the
	// vGPU and runs beside the rest of it (switchover.go); a failed
	// switchover ends the stop phase (sctx).
	sctx, failStop := context.WithCancelCause(pctx)
	defer failStop(nil)
	m.sw = newSwitchover(pctx, m.VM, failStop)
	defer m.sw.release()
	if err := m.live(pctx, incoming); err != nil {
		stopWatch()
		return m.rollback(ctx, "pre-copy", cancelCause(jctx, hungUp(jctx, pctx, err)))
	}
	if err := m.stop(sctx); err != nil {
		// The switchover is waited for (cancelled first) before the
		// rollback resumes the VM, whatever state it left the VMM in.
		swErr := m.sw.abandon()
		stopWatch()
		if swErr != nil && context.Cause(sctx) == swErr {
			return m.rollback(ctx, "VMM switchover", cancelCause(jctx, swErr))
		}
		return m.rollback(ctx, "stop phase", cancelCause(jctx, hungUp(jctx, pctx, err)))
	}
	m.progress.enter(PhaseSwitchover)
	err = m.sw.wait()
	m.times.switchStart, m.times.switchEnd = m.sw.start, m.sw.end
	if !stopWatch() && err == nil {
		err = context.Cause(pctx)
	}
	if err != nil {
		return m.rollback(ctx, "VMM switchover", cancelCause(jctx, hungUp(jctx, pctx, err)))
	}
	// The commit comes only now: after the destination's verdict (the
	// stop phase) and the VMM's completed switchover, both.
	if err := m.Control.commitPoint(jctx); err != nil {
		return m.rollback(ctx, "commit point", err)
	}
	m.times.switched = time.Now()
	m.rep.VMM = m.VM.Progress()
	m.progress.enter(PhaseCommit)
	d, err := m.commit(ctx)
	if err != nil {
		return err
	}
	m.finish(ctx, d)
	return nil
}

// ctlMsg is one message from the destination after ready, undecoded.
type ctlMsg struct {
	raw json.RawMessage
	err error
}

// readControl reads the destination's messages until the connection ends.
func (m *outgoing) readControl() {
	for {
		var raw json.RawMessage
		err := readMsg(m.ctl, &raw)
		m.ctlIn <- ctlMsg{raw, err}
		if err != nil {
			return
		}
	}
}

// watchControl returns ctx, cancelled if the destination gives up (with
// its reason), says anything else or hangs up before the commit; stop ends the watch and reports whether the
// context is still live (false: the destination went away).
func (m *outgoing) watchControl(ctx context.Context) (context.Context, func() bool) {
	wctx, cancel := context.WithCancelCause(ctx)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case msg := <-m.ctlIn:
			var g gaveUp
			switch {
			case msg.err != nil:
				cancel(fmt.Errorf("orchestrator: the destination's control connection: %w", msg.err))
			case json.Unmarshal(msg.raw, &g) == nil && g.GaveUp != "":
				cancel(fmt.Errorf("%w: %s", ErrDestinationGaveUp, g.GaveUp))
			default:
				cancel(fmt.Errorf("orchestrator: the destination's control connection: unexpected message %s before the commit", msg.raw))
			}
		case <-done:
		}
	}()
	return wctx, func() bool {
		close(done)
		<-exited
		live := wctx.Err() == nil
		cancel(nil)
		return live
	}
}

// hungUp names the destination's hang-up (watchControl's cause) in err
// when that is what ended a phase, which itself saw only its context
// cancelled; a cancelled ctx (the caller's) is left as it is.
func hungUp(ctx, pctx context.Context, err error) error {
	if ctx.Err() != nil || !errors.Is(err, context.Canceled) {
		return err
	}
	if cause := context.Cause(pctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}

// await waits for the destination's next message and decodes it into v.
func (m *outgoing) await(v any, timeout time.Duration) error {
	select {
	case msg := <-m.ctlIn:
		if msg.err != nil {
			return msg.err
		}
		if err := json.Unmarshal(msg.raw, v); err != nil {
			return fmt.Errorf("orchestrator: malformed %T: %w", v, err)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("orchestrator: no %T from the destination within %v", v, timeout)
	}
}

// prepare opens the control connection and asks the destination for a
// vGPU and a VM like ours; it returns where the VMM migrates to.
func (m *outgoing) prepare(ctx context.Context) (string, error) {
	name := m.Name
	if name == "" {
		name = m.VGPU.Name()
	}
	var err error
	if m.ctl, err = m.dial(ctx, kindMigrate); err != nil {
		return "", err
	}
	p := Prepare{
		ID:       m.id,
		Name:     name,
		VGPU:     m.VGPU.Spec(),
		VMKind:   m.VMKind,
		VM:       m.VMSpec,
		Strategy: m.rep.Strategy,
	}
	var r ready
	// The exchange waits on deadlines only: a cancel (the owner's, or the
	// caller's ctx) ends it at once, as it ends the later phases.
	stop := context.AfterFunc(ctx, func() { _ = m.ctl.SetDeadline(time.Now()) })
	err = exchange(m.ctl, m.Timeouts.Message, p, &r)
	switch {
	case stop():
	case err != nil:
		err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	default: // the answer came as the cancel did: the cancel wins
		err = context.Cause(ctx)
	}
	switch {
	case err != nil:
		return "", err
	case r.Error != "":
		return "", fmt.Errorf("orchestrator: the destination refused: %s", r.Error)
	}
	m.instance = r.Instance
	m.streams = m.agreeStreams(r.Streams)
	m.ctlIn = make(chan ctlMsg, 4)
	go m.readControl()
	m.log.Info().Str("incoming", r.Incoming).Int("streams", m.streams).Msg("destination ready")
	return r.Incoming, nil
}

// live runs the vGPU's live phase, then starts the VMM's migration and
// waits for the VMM to pause the VM.
func (m *outgoing) live(ctx context.Context, incoming string) error {
	data, err := m.dial(ctx, kindData)
	if err != nil {
		return err
	}
	// The vGPU stream's writes draw from the bandwidth limit (bandwidth.go).
	m.data = newLimitedConn(data, m.Control.limit)
	opts := m.Precopy
	opts.Log = m.log
	quiesced := opts.Quiesced
	opts.Quiesced = func() {
		if quiesced != nil {
			quiesced()
		}
		m.sw.begin()
	}
	if m.src, err = precopy.NewSource(m.VGPU, m.data, opts); err != nil {
		return err
	}
	if err := m.openStreams(ctx); err != nil {
		return err
	}
	m.progress.track(m.src.Sent, uint64(m.src.Pages()))
	m.progress.enter(PhaseVGPULive)
	t := time.Now()
	if err := m.src.Precopy(ctx); err != nil {
		return err
	}
	m.rep.VGPULive = time.Since(t)
	var link float64 // bytes/s; 0: nothing sent live (stop-and-copy)
	if _, sent := m.src.Sent(); sent > 0 && m.rep.VGPULive > 0 {
		link = float64(sent) / m.rep.VGPULive.Seconds()
	}
	if err := m.converge(ctx, link); err != nil {
		return err
	}

	// The VMM's migration starts only now, so the VM is never paused
	// before the vGPU's live phase has ended (QEMU 11.1 cannot be told to
	// hold its switchover: docs/migration-protocol.md, "Ordering").
	m.progress.enter(PhaseVMMLive)
	t = time.Now()
	if err := m.VM.Migrate(ctx, incoming); err != nil {
		return fmt.Errorf("starting the VMM's migration: %w", err)
	}
	stopShare := m.shareBandwidth(ctx)
	paused, err := m.VM.WaitPaused(ctx)
	stopShare()
	if err != nil {
		return fmt.Errorf("waiting for the VMM to pause the VM: %w", err)
	}
	m.rep.VMMLive = time.Since(t)
	m.times.paused = paused
	return nil
}

// stop runs the vGPU's stop phase with the VM paused.
func (m *outgoing) stop(ctx context.Context) error {
	m.progress.enter(PhaseStop)
	// The VM is paused: a destination that stops answering (its verdict
	// lost on a stalled connection) must not keep it so.
	ctx, cancel := context.WithTimeout(ctx, m.Timeouts.Decision)
	defer cancel()
	m.times.stopStart = time.Now()
	rep, err := m.src.Stop(ctx)
	m.times.stopEnd = time.Now()
	m.rep.Precopy = rep
	return err
}

// commit sends the decision and learns the outcome; on any outcome but
// the destination running the VM, the source runs on.
func (m *outgoing) commit(ctx context.Context) (DestTimes, error) {
	// The answer is committed, or the destination's gaveUp when it gave
	// up (an early attach failed: attach.go) as the commit was on its way.
	var c struct {
		committed
		gaveUp
	}
	_ = m.ctl.SetWriteDeadline(time.Now().Add(m.Timeouts.Message))
	err := writeMsg(m.ctl, decision{Commit: true})
	if err == nil {
		err = m.await(&c, m.Timeouts.Decision)
	}
	if err == nil {
		switch {
		case c.OK:
			return c.Times, nil
		case c.GaveUp != "":
			return DestTimes{}, m.rollback(ctx, "commit", fmt.Errorf("%w: %s", ErrDestinationGaveUp, c.GaveUp))
		}
		return DestTimes{}, m.rollback(ctx, "commit", fmt.Errorf("the destination could not resume the VM: %s", c.Error))
	}
	m.log.Warn().Err(err).Msg("commit unanswered; asking the destination what became of it")
	state, qerr := Resolve(ctx, m.Transport, m.Peer, m.id, m.Timeouts.Resolve)
	switch {
	case qerr != nil:
		m.log.Error().Err(qerr).Msg("migration outcome unknown; the VM stays paused here")
		if m.OnResolved != nil {
			go m.resolveLater()
		}
		return DestTimes{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, qerr)
	case state == outcomeResumed:
		// The destination runs the VM; only its timestamps were lost.
		return DestTimes{}, nil
	}
	return DestTimes{}, m.rollback(ctx, "commit", fmt.Errorf("%w (the destination says %q)", err, state))
}

// resolveLater asks the destination until it answers, then releases or
// rolls back the source and tells OnResolved.
func (m *outgoing) resolveLater() {
	ctx := context.Background()
	for {
		state, err := Resolve(ctx, m.Transport, m.Peer, m.id, m.Timeouts.Resolve)
		if err != nil {
			m.log.Warn().Err(err).Msg("migration outcome still unknown; asking again")
			continue
		}
		runs := state == outcomeResumed
		if runs {
			m.src.Close()
			if err := m.VM.Release(ctx); err != nil {
				m.log.Warn().Err(err).Msg("releasing the VM at the source")
			}
		} else {
			m.src.Rollback()
			if err := m.VM.Resume(ctx); err != nil {
				m.log.Error().Err(err).Msg("resuming the VM at the source")
			}
		}
		m.log.Info().Str("outcome", state).Msg("migration outcome resolved")
		m.OnResolved(runs)
		return
	}
}

// finish releases the VM here and completes the report.
func (m *outgoing) finish(ctx context.Context, d DestTimes) {
	m.src.Close()
	if err := m.VM.Release(ctx); err != nil {
		m.log.Warn().Err(err).Msg("releasing the VM at the source")
	}
	m.rep.ConfigWrites = d.ConfigWrites
	if !d.Resumed.IsZero() {
		m.rep.PausedAt, m.rep.ResumedAt = m.times.paused.Round(0), d.Resumed.Round(0)
		m.rep.Downtime = m.rep.ResumedAt.Sub(m.rep.PausedAt)
		m.rep.Terms, m.rep.ClockSkewSuspect = terms(m.times, m.rep.Precopy.Stop, d)
		m.rep.Beside = beside(m.times, d)
		// Only an answered commit leaves a control connection that the
		// destination's first heartbeat comes on.
		m.guestGap()
	}
}

// guestGap reads the destination's first heartbeat after the resume and
// sets the guest-observed downtime.
func (m *outgoing) guestGap() {
	if m.Beats == nil {
		return
	}
	last, ok := m.Beats.Last()
	if !ok {
		m.log.Info().Msg("the guest sent no heartbeat here: the guest-observed downtime is not measured")
		return
	}
	var b beat
	if err := m.await(&b, m.Timeouts.Beat+m.Timeouts.Message); err != nil || !b.OK {
		m.log.Warn().AnErr("err", err).Msg("no guest heartbeat from the destination: the guest-observed downtime is not measured")
		return
	}
	m.rep.GuestBeats = true
	m.rep.GuestGap = b.At.Round(0).Sub(last.At.Round(0))
}

// rollback ends a failed migration with the source running: the vGPU
// resumes (precopy.Source.Rollback), the VMM's migration is cancelled and
// the VM resumed, and the destination is told to discard what it built.
func (m *outgoing) rollback(ctx context.Context, phase string, cause error) error {
	m.progress.enter(PhaseRollback)
	if m.src != nil {
		m.src.Rollback()
	}
	// Resuming must not be cut short by the ctx that failed.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.Timeouts.Message)
	defer cancel()
	rerr := m.VM.Resume(rctx)
	if m.ctl != nil {
		_ = m.ctl.SetWriteDeadline(time.Now().Add(time.Second))
		_ = writeMsg(m.ctl, decision{Reason: fmt.Sprintf("%s: %v", phase, cause)})
	}
	if rerr != nil {
		err := fmt.Errorf("%w: %s: %w; resuming it: %w", ErrNotResumed, phase, cause, rerr)
		m.log.Error().Err(err).Msg("migration rolled back; the VM did not resume")
		return err
	}
	err := fmt.Errorf("%w: %s: %w", ErrRolledBack, phase, cause)
	m.log.Warn().Err(err).Msg("migration rolled back")
	return err
}

// dial opens a connection of kind for this migration.
func (m *outgoing) dial(ctx context.Context, kind string) (net.Conn, error) {
	return dialHello(ctx, m.Transport, m.Peer, hello{Version: ProtocolVersion, Kind: kind, ID: m.id}, m.Timeouts.Message)
}

func dialHello(ctx context.Context, t Transport, peer string, h hello, timeout time.Duration) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := t.Dial(dctx, peer)
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if err := writeMsg(c, h); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// exchange sends req and reads the answer into resp within timeout.
func exchange(c net.Conn, timeout time.Duration, req, resp any) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if err := writeMsg(c, req); err != nil {
		return err
	}
	return readMsg(c, resp)
}

// Resolve asks the destination at peer what became of migration id, again
// and again until it answers with a final outcome or timeout passes. It
// returns "resumed" (the destination runs the VM), "aborted" or "unknown"
// (it does not: the source may resume), or an error when no final answer
// came.
func Resolve(ctx context.Context, t Transport, peer, id string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := 100 * time.Millisecond
	var last error
	for {
		state, err := query(ctx, t, peer, id)
		switch {
		case err == nil && state != outcomePending:
			return state, nil
		case err == nil:
			last = errors.New("the destination has not decided yet")
		case last == nil || ctx.Err() == nil:
			// An attempt the deadline cut short says less than the one
			// before it.
			last = err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("orchestrator: asking %s about migration %s: %w", peer, id, last)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func query(ctx context.Context, t Transport, peer, id string) (string, error) {
	c, err := dialHello(ctx, t, peer, hello{Version: ProtocolVersion, Kind: kindQuery, ID: id}, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var o outcome
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := readMsg(c, &o); err != nil {
		return "", err
	}
	return o.State, nil
}
