package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// Host is the destination gmigd as an incoming migration needs it.
type Host interface {
	// Land creates what an incoming migration needs: the vGPU p.VGPU
	// describes (p.VGPU.Config(p.Name); the Destination refuses a landed
	// vGPU that is not exactly it), quiesced and served on its vfio-user
	// socket but not yet live here, and the VM p.VMKind and p.VM
	// describe, started paused for the incoming migration and attached to
	// that vGPU. Any refusal (a name in use, no room, a spec this host
	// cannot provide, an unsafe VM) is an error the source is told; Land
	// leaves nothing behind when it fails. via is this host's end of
	// the source's control connection: an address the source reaches this
	// host at (where the VMM's incoming migration can listen).
	Land(ctx context.Context, p Prepare, via net.Addr) (Landing, error)
}

// Landing is an incoming migration's vGPU and VM at the destination.
type Landing interface {
	VGPU() *vgpu.VGPU
	VM() DestVM
	// Beats is the vGPU's heartbeat recorder here (nil: none).
	Beats() *Heartbeats
	// Commit makes the vGPU and the VM this host's own, once the VM runs.
	Commit()
	// Discard removes the vGPU and the VM: the migration failed and
	// nothing of it stays here.
	Discard()
}

// Arrival is an incoming migration's end, for the destination's owner.
type Arrival struct {
	Prepare Prepare
	Report  precopy.Report // the vGPU's, as the destination measured it
	Times   DestTimes
	Err     error // nil: the VM runs here
}

// DestinationOptions configure a Destination.
type DestinationOptions struct {
	Timeouts Timeouts
	Log      zerolog.Logger
	// OnArrival, if set, is told each incoming migration's end.
	OnArrival func(Arrival)
	// Outcomes keeps what this destination decided, for the sources'
	// questions; nil: in memory only (a FileOutcomes survives a restart).
	Outcomes OutcomeStore
	// Streams is the most streams this destination takes for a vGPU's
	// stop phase (0: precopy.MaxDefaultStreams, whatever its cores; the
	// source opens at most this many).
	Streams int
}

// Destination accepts incoming migrations for a Host.
type Destination struct {
	host     Host
	opts     DestinationOptions
	log      zerolog.Logger
	instance string

	mu   sync.Mutex
	data map[string]*waiting // migrations waiting for their streams
}

// outcomeKeep is how long MemoryOutcomes keeps an aborted migration's
// outcome for queries; once forgotten it reads "unknown", which tells the
// source the same: the VM does not run here. A resumed or pending one is
// kept for the life of the instance: forgotten, it would read "unknown"
// too, and a source still asking would resume a VM that runs (or is about
// to run) here.
const outcomeKeep = 30 * time.Minute

// NewDestination returns a Destination for h.
func NewDestination(h Host, opts DestinationOptions) *Destination {
	opts.Timeouts = opts.Timeouts.withDefaults()
	if opts.Streams == 0 {
		opts.Streams = precopy.MaxDefaultStreams
	}
	if opts.Outcomes == nil {
		opts.Outcomes = &MemoryOutcomes{}
	}
	id := newID()
	return &Destination{
		host: h, opts: opts, instance: id,
		log:  opts.Log.With().Str("instance", id).Logger(),
		data: map[string]*waiting{},
	}
}

// Serve accepts connections on l until ctx ends (it then closes l, ends
// the migrations in flight, discarding what they built, and returns nil).
func (d *Destination) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("orchestrator: accepting: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.serveConn(ctx, c)
		}()
	}
}

func (d *Destination) serveConn(ctx context.Context, c net.Conn) {
	var h hello
	_ = c.SetReadDeadline(time.Now().Add(d.opts.Timeouts.Message))
	if err := readMsg(c, &h); err != nil || h.Version != ProtocolVersion || h.ID == "" {
		d.log.Warn().Err(err).Str("peer", c.RemoteAddr().String()).Int("version", h.Version).
			Msg("connection without a valid hello; closed")
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch h.Kind {
	case kindMigrate:
		defer c.Close()
		d.incoming(ctx, c, h.ID)
	case kindData, kindStream:
		d.mu.Lock()
		err := errNoStream
		if w, ok := d.data[h.ID]; ok {
			err = w.routeLocked(c, h)
		}
		d.mu.Unlock()
		if err != nil {
			d.log.Warn().Err(err).Str("migration", h.ID).Str("kind", h.Kind).Int("index", h.Index).Msg("stream closed")
			c.Close()
		}
	case kindCheck:
		defer c.Close()
		d.check(ctx, c, h.ID)
	case kindQuery:
		defer c.Close()
		_ = c.SetWriteDeadline(time.Now().Add(d.opts.Timeouts.Message))
		_ = writeMsg(c, outcome{State: d.outcome(h.ID), Instance: d.instance})
	default:
		d.log.Warn().Str("kind", h.Kind).Msg("unknown connection kind; closed")
		c.Close()
	}
}

func (d *Destination) outcome(id string) string {
	if o, ok := d.opts.Outcomes.Load(id); ok {
		return o.State
	}
	return outcomeUnknownID
}

// record saves a migration's outcome; pid is its VMM's while pending.
func (d *Destination) record(id, state string, pid int) error {
	return d.opts.Outcomes.Save(id, Outcome{State: state, At: time.Now(), PID: pid})
}

// incoming is one migration at the destination, on its control
// connection (doc.go, "The sequence").
func (d *Destination) incoming(ctx context.Context, ctl net.Conn, id string) {
	in := &arriving{d: d, ctl: ctl, id: id, log: d.log.With().Str("migration", id).Logger()}
	if _, known := d.opts.Outcomes.Load(id); known {
		in.log.Warn().Msg("a second control connection for a known migration; closed")
		return
	}
	err := d.record(id, outcomePending, 0)
	if err == nil {
		err = in.run(ctx)
	}
	if err != nil && !in.resumed {
		in.giveUp(err)
		in.discard()
		if rerr := d.record(id, outcomeAborted, 0); rerr != nil {
			in.log.Error().Err(rerr).Msg("recording the abort")
		}
		in.log.Warn().Err(err).Msg("incoming migration failed; nothing of it kept")
	}
	if d.opts.OnArrival != nil {
		d.opts.OnArrival(Arrival{Prepare: in.prepare, Report: in.rep, Times: in.times, Err: err})
	}
}

// arriving is one incoming migration's state.
type arriving struct {
	d       *Destination
	ctl     net.Conn
	id      string
	log     zerolog.Logger
	prepare Prepare
	landing Landing
	rep     precopy.Report
	times   DestTimes
	att     *attaching // the VMM's load, the guest RAM and the front end (attach.go)
	resumed bool       // the VM runs here (whatever fails afterwards)
	gone    bool       // the landing was discarded
	// saidReady and decided bound when the source is told why this side
	// gave up: after ready, before the source's decision.
	saidReady, decided bool
}

// giveUpWrite bounds the write of the destination's reason: the discard
// that follows must not wait on a stalled link.
const giveUpWrite = time.Second

// giveUp tells a source still waiting for this side why it gave up, before
// the discard ends the VMM's incoming migration (which the source would
// otherwise see first, as a bare connection error).
func (in *arriving) giveUp(err error) {
	if !in.saidReady || in.decided {
		return
	}
	_ = in.ctl.SetWriteDeadline(time.Now().Add(giveUpWrite))
	_ = writeMsg(in.ctl, gaveUp{GaveUp: err.Error()})
}

// discard removes what the migration built here, once.
func (in *arriving) discard() {
	if in.landing != nil && !in.gone {
		in.gone = true
		in.landing.Discard()
	}
}

func (in *arriving) run(ctx context.Context) error {
	t := in.d.opts.Timeouts
	_ = in.ctl.SetReadDeadline(time.Now().Add(t.Message))
	if err := readMsg(in.ctl, &in.prepare); err != nil {
		return err
	}
	if in.prepare.ID != in.id {
		return in.refuse(fmt.Errorf("Prepare for migration %q on the connection of %q", in.prepare.ID, in.id))
	}
	in.log = in.log.With().Str("vgpu", in.prepare.Name).Str("vm_kind", in.prepare.VMKind).Logger()
	streams := newWaiting(in.d.opts.Streams)
	in.d.mu.Lock()
	in.d.data[in.id] = streams
	in.d.mu.Unlock()
	defer func() {
		in.d.mu.Lock()
		delete(in.d.data, in.id)
		streams.closeLeftLocked()
		in.d.mu.Unlock()
	}()

	lctx, cancel := context.WithTimeout(ctx, t.Message)
	landing, err := in.d.host.Land(lctx, in.prepare, in.ctl.LocalAddr())
	cancel()
	if err != nil {
		return in.refuse(err)
	}
	in.landing = landing
	if err := landing.VGPU().Is(in.prepare.VGPU); err != nil {
		in.discard() // before the source hears: it may retry at once
		return in.refuse(fmt.Errorf("orchestrator: the vGPU landed here: %w", err))
	}
	if p, ok := landing.VM().(interface{ PID() int }); ok {
		if err := in.d.record(in.id, outcomePending, p.PID()); err != nil {
			return in.refuse(err)
		}
	}
	_ = in.ctl.SetWriteDeadline(time.Now().Add(t.Message))
	if err := writeMsg(in.ctl, ready{Incoming: landing.VM().Incoming(), Instance: in.d.instance, Streams: streams.streams}); err != nil {
		return err
	}
	in.saidReady = true
	in.log.Info().Str("incoming", landing.VM().Incoming()).Msg("ready for the migration")

	// One reader of the control connection from here on: the source's
	// decision, or its end. An abort or a dropped connection during the
	// stream ends the receive.
	decided := make(chan decisionResult, 1)
	go func() {
		var dec decision
		_ = in.ctl.SetReadDeadline(time.Time{})
		err := readMsg(in.ctl, &dec)
		decided <- decisionResult{dec, err}
	}()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	early := make(chan decisionResult, 1)
	go func() {
		select {
		case r := <-decided:
			early <- r
			cancel()
		case <-rctx.Done():
		}
	}()
	if err := in.receive(rctx, streams, in.attachOnFrontEnd(ctx)); err != nil {
		in.att.abandon() // an attach begun with the front end: before the discard
		return err
	}
	cancel()
	// The verdict is sent: a VM whose attaching can be discarded is
	// attached now, beside the wait for the decision (attach.go).
	in.att = in.attachEarly(ctx)
	dec, err := in.decision(ctx, early, decided, in.att.failures())
	if err != nil || !dec.Commit {
		in.att.abandon() // before the discard
	}
	if err != nil {
		return err
	}
	in.decided = true
	if !dec.Commit {
		return fmt.Errorf("orchestrator: the source aborted: %s", dec.Reason)
	}
	return in.resume(ctx)
}

type decisionResult struct {
	dec decision
	err error
}

// decision waits for the source's decision after the verdict, bounded by
// the decision timeout and ctx (Serve's: this gmigd shutting down); a
// dropped connection, the timeout or ctx's end is an abort, and so is an
// early attach's failure (attachFailed) before the decision came.
func (in *arriving) decision(ctx context.Context, early, decided <-chan decisionResult, attachFailed <-chan error) (decision, error) {
	var r decisionResult
	select {
	case r = <-early:
	default:
		select {
		case r = <-early:
		case r = <-decided:
		case err := <-attachFailed:
			return decision{}, err
		case <-time.After(in.d.opts.Timeouts.Decision):
			return decision{}, errors.New("orchestrator: no decision from the source in time")
		case <-ctx.Done():
			return decision{}, fmt.Errorf("orchestrator: gmigd shutting down while waiting for the source's decision: %w", ctx.Err())
		}
	}
	if r.err != nil {
		return decision{}, fmt.Errorf("orchestrator: waiting for the source's decision: %w", r.err)
	}
	return r.dec, nil
}

// refuse tells the source why the migration cannot land here.
func (in *arriving) refuse(err error) error {
	_ = in.ctl.SetWriteDeadline(time.Now().Add(in.d.opts.Timeouts.Message))
	_ = writeMsg(in.ctl, ready{Error: err.Error(), Instance: in.d.instance})
	return err
}

// receive takes the vGPU stream, and the stop phase's extra streams, into
// the landed vGPU; the verdict goes back on the stream's connection.
func (in *arriving) receive(ctx context.Context, streams *waiting, frontEnd func([]apilog.Entry, *precopy.GuestRAM)) error {
	var data net.Conn
	select {
	case data = <-streams.data:
	case <-time.After(in.d.opts.Timeouts.Data):
		return errors.New("orchestrator: the vGPU stream did not arrive")
	case <-ctx.Done():
		return ctx.Err()
	}
	defer data.Close()
	extra := &extraStreams{w: streams, timeout: in.d.opts.Timeouts.Data}
	defer extra.closeAll()
	rep, err := precopy.Receive(ctx, data, in.landing.VGPU(),
		precopy.Options{Log: in.log, Streams: streams.streams, NextStream: extra.next, FrontEndArrived: frontEnd})
	in.rep = rep
	return err
}

// resume runs the VM here after the source's commit: the attach (the
// VMM's load, the device-written guest RAM, the front end's config writes;
// attach.go) ends, or runs now if it did not start before the decision,
// the engine runs, the VM runs; then the source hears it, and later the
// guest's first heartbeat here.
func (in *arriving) resume(ctx context.Context) error {
	t := in.d.opts.Timeouts
	in.times.CommitReceived = time.Now()
	vm, v := in.landing.VM(), in.landing.VGPU()
	// "resumed" is recorded durably before the VM can run (from then on
	// this destination never tells the source it did not run it); the
	// write goes on beside the VMM's load and the front end's restore,
	// and is waited for before cont.
	recorded := make(chan error, 1)
	go func() { recorded <- in.d.record(in.id, outcomeResumed, 0) }()
	var recordErr error
	recordDone := false
	awaitRecord := func() error {
		if !recordDone {
			recordErr, recordDone = <-recorded, true
		}
		return recordErr
	}
	fail := func(what string, err error) error {
		err = fmt.Errorf("orchestrator: %s: %w", what, err)
		// The record may say resumed: it says aborted before anything is
		// discarded, or the VM is kept paused for the operator.
		if awaitRecord() == nil {
			if rerr := in.d.record(in.id, outcomeAborted, 0); rerr != nil {
				in.log.Error().Err(rerr).Msg("the VM did not resume here and the record says it did; the paused VM is kept")
				in.resumed = true
			}
		}
		// Discarded before the source hears: it may retry at once.
		if !in.resumed {
			in.discard()
		}
		_ = in.ctl.SetWriteDeadline(time.Now().Add(t.Message))
		_ = writeMsg(in.ctl, committed{Error: err.Error()})
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, t.Decision)
	defer cancel()
	if in.att == nil {
		in.att = in.attach(rctx, in.times.CommitReceived)
	}
	if err := in.att.wait(); err != nil {
		return fail(err.what, err.err)
	}
	in.times.attached(in.att)
	writes := in.att.writes
	if err := awaitRecord(); err != nil {
		return fail("recording the commit", err)
	}
	in.times.Recorded = time.Now()
	// The engine is unparked beside the VM's resume: doorbells the guest
	// rings meanwhile are recorded and run once it is.
	engine := make(chan struct{})
	go func() { v.Resume(); close(engine) }()
	in.times.EngineRun = time.Now()
	resumed, err := vm.Resume(rctx)
	<-engine
	if err != nil {
		v.Quiesce()
		return fail("resuming the VM", err)
	}
	in.resumed = true
	in.times.Resumed = resumed
	in.landing.Commit()
	in.log.Info().Time("resumed", resumed).Int("config_writes", len(writes)).Msg("migration arrived; the VM runs here")
	_ = in.ctl.SetWriteDeadline(time.Now().Add(t.Message))
	if err := writeMsg(in.ctl, committed{OK: true, Times: in.times}); err != nil {
		// The VM runs here; the source learns it by asking (Resolve).
		in.log.Warn().Err(err).Msg("telling the source the VM runs here")
		return nil
	}
	in.sendBeat(ctx, resumed)
	return nil
}

// sendBeat sends the guest's first heartbeat after the resume, if one
// comes in time.
func (in *arriving) sendBeat(ctx context.Context, resumed time.Time) {
	b := beat{}
	if beats := in.landing.Beats(); beats != nil {
		bctx, cancel := context.WithTimeout(ctx, in.d.opts.Timeouts.Beat)
		first, ok := beats.FirstAfter(bctx, resumed)
		cancel()
		b = beat{OK: ok, Value: first.Value, At: first.At}
		if !ok {
			in.log.Warn().Dur("waited", in.d.opts.Timeouts.Beat).
				Msg("no guest heartbeat after the resume: the guest-observed downtime is not measured")
		}
	}
	_ = in.ctl.SetWriteDeadline(time.Now().Add(in.d.opts.Timeouts.Message))
	_ = writeMsg(in.ctl, b)
}
