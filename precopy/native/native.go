package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vfio"
	"github.com/gmig-dev/gmig/vgpu"
)

// Device is a vGPU that migrates through the vfio-user protocol itself
// (VFIO_USER_DEVICE_FEATURE with the migration state, MIG_DATA_READ and
// MIG_DATA_WRITE), for a VMM whose vfio-user client drives the VFIO
// migration v2 state machine (QEMU 11.1's does not: docs/migration-protocol.md). It embeds the vGPU, which makes it a vfio.Device, and
// implements vfio.Migrator; serve it with v.ServeDevice(ctx, l, n).
//
// The migration data is exactly the stream of docs/migration-stream.md,
// written by a Source and read by precopy.Receive in the verdict-less mode
// (§10): the VMM carries the outcome. The FSM's arcs (nativeArcs):
//
//	RUNNING -> PRE_COPY    a Source starts; its live phase runs on a goroutine
//	                       into a buffer that MIG_DATA_READ drains
//	PRE_COPY -> STOP_COPY  the engine is quiesced; the live phase ends, then
//	                       the stop phase runs
//	RUNNING -> STOP        the engine is quiesced (source and destination)
//	STOP -> STOP_COPY      a Source starts and runs the stop phase only
//	STOP_COPY -> STOP      the save ends, the engine stays quiesced; before
//	                       End was read, the save is rolled back
//	PRE_COPY -> RUNNING    the save is rolled back; the engine ran throughout
//	STOP -> RUNNING        the engine resumes (a source's memory is untouched)
//	STOP -> RESUMING       precopy.Receive starts on a goroutine, reading what
//	                       MIG_DATA_WRITE passes it, straight into this vGPU
//	RESUMING -> STOP       the end of the data: waits for precopy.Receive and
//	                       fails with its error (the FSM then stays RESUMING
//	                       until a reset)
//
// Reset (VFIO_USER_DEVICE_RESET) ends a save or resume in progress, resets
// the vGPU and lets its engine run. The front end's config writes are not
// replayed on the destination: a VMM that migrates natively saves its own
// PCI config (QEMU's vfio-pci does); they are recorded in the vGPU's API
// log.
//
// Goroutines: the server's request goroutine calls every method (the
// vfio.Device contract: calls never overlap); a save has one producer
// goroutine and a resume one consumer, each finished before the arc or
// Reset that ends it returns. Close once the server has stopped.
type Device struct {
	*vgpu.VGPU
	opts precopy.Options
	log  zerolog.Logger

	save   *saveSession   // PRE_COPY and STOP_COPY
	load   *loadSession   // RESUMING
	report precopy.Report // the last save or resume that completed
}

// New returns v ready to migrate through vfio-user with opts (the
// strategy, workers and log of its saves; NoVerdict is implied).
func New(v *vgpu.VGPU, opts precopy.Options) (*Device, error) {
	opts.NoVerdict = true
	if _, err := opts.WithDefaults(); err != nil {
		return nil, err
	}
	return &Device{VGPU: v, opts: opts, log: opts.Log.With().Str("vgpu", v.Name()).Logger()}, nil
}

// errAborted ends a save or resume that a reset, a roll-back or Close cut short.
var errAborted = errors.New("native: migration aborted")

// nativeBuffer is how many bytes of stream a save holds ahead of
// MIG_DATA_READ before its producer waits: a few batches.
const nativeBuffer = 4 << 20

// MigDataSize's estimate of the encoded state beyond the GTT: config
// space, registers, engine, API log, Meta sections and framing.
const (
	gttEntryBytes = 9 // a gob'd uint64, at most
	stateOverhead = 16 << 10
)

type arc [2]vfio.MigState

// nativeArcs is what each arc of the FSM does; they are the arcs of a
// device with STOP_COPY and PRE_COPY (vfio.MigArc).
var nativeArcs = map[arc]func(n *Device) error{
	{vfio.MigStateRunning, vfio.MigStateStop}:     func(n *Device) error { n.Quiesce(); return nil },
	{vfio.MigStateStop, vfio.MigStateRunning}:     func(n *Device) error { n.Resume(); return nil },
	{vfio.MigStateRunning, vfio.MigStatePreCopy}:  func(n *Device) error { return n.startSave(true) },
	{vfio.MigStateStop, vfio.MigStateStopCopy}:    func(n *Device) error { return n.startSave(false) },
	{vfio.MigStatePreCopy, vfio.MigStateStopCopy}: (*Device).stopCopy,
	{vfio.MigStatePreCopy, vfio.MigStateRunning}:  func(n *Device) error { n.endSave(); return nil },
	{vfio.MigStateStopCopy, vfio.MigStateStop}:    (*Device).finishSave,
	{vfio.MigStateStop, vfio.MigStateResuming}:    (*Device).startLoad,
	{vfio.MigStateResuming, vfio.MigStateStop}:    (*Device).finishLoad,
}

// MigrationFlags implements vfio.Migrator: STOP_COPY and PRE_COPY.
func (n *Device) MigrationFlags() uint64 { return vfio.MigrationStopCopy | vfio.MigrationPreCopy }

// SetMigState implements vfio.Migrator.
func (n *Device) SetMigState(from, to vfio.MigState) error {
	do, ok := nativeArcs[arc{from, to}]
	if !ok {
		return fmt.Errorf("native: migration arc %s -> %s: %w", from, to, unix.EINVAL)
	}
	n.log.Debug().Stringer("from", from).Stringer("to", to).Msg("migration arc")
	return do(n)
}

// MigDataRead implements vfio.Migrator. In PRE_COPY it waits while the
// live phase is producing and returns 0 once it has all been read; in
// STOP_COPY it waits for data, and returns io.EOF after End.
func (n *Device) MigDataRead(p []byte) (int, error) {
	s := n.save
	if s == nil {
		return 0, fmt.Errorf("native: migration data read without a save: %w", unix.EINVAL)
	}
	return s.out.read(p, s.stopping)
}

// MigDataWrite implements vfio.Migrator: p goes to precopy.Receive, which
// takes it before the call returns. Once it has failed, every write fails
// with its error.
func (n *Device) MigDataWrite(p []byte) error {
	l := n.load
	if l == nil {
		return fmt.Errorf("native: migration data written without a resume: %w", unix.EINVAL)
	}
	if _, err := l.in.Write(p); err != nil {
		return fmt.Errorf("native: incoming migration data: %w", err)
	}
	return nil
}

// MigDataSize implements vfio.Migrator with an estimate, not a bound: the
// stream not yet read, plus every page until a live phase has sent them
// all, afterwards the bytes the engine has written since (the dirty pages
// known so far: the guest CPU's writes to the aperture are found only by
// hashing at the stop), plus the state.
func (n *Device) MigDataSize() uint64 {
	cfg := n.Config()
	state := uint64(cfg.GTTEntries)*gttEntryBytes + stateOverhead
	all := cfg.MemSize/stream.PageSize*(stream.RecordHeaderSize+stream.PageSize) + state
	s := n.save
	if s == nil {
		return all
	}
	buffered, finished := s.out.unread()
	mark := s.liveEnd.Load()
	switch {
	case finished:
		return buffered
	case mark == 0 || n.opts.Strategy == precopy.StopCopy:
		return buffered + all
	}
	return buffered + min(n.Stats().BytesWritten-(mark-1), cfg.MemSize) + state
}

// Reset implements vfio.Device: a save or resume in progress is aborted
// (a save rolled back), the vGPU is reset and its engine runs.
func (n *Device) Reset() error {
	n.endSave()
	n.endLoad()
	err := n.VGPU.Reset()
	n.Resume()
	return err
}

// Close ends a save or resume in progress as Reset does, then closes the
// vGPU. Call it once the server no longer serves n.
func (n *Device) Close() error {
	n.endSave()
	n.endLoad()
	return n.VGPU.Close()
}

// Report returns the report of the last save or resume that completed.
func (n *Device) Report() precopy.Report { return n.report }

// saveSession is one save: a Source writing into out on its producer
// goroutine.
type saveSession struct {
	src      *precopy.Source
	out      *migBuffer
	cancel   context.CancelFunc
	stopNow  chan struct{}  // closed at STOP_COPY: the producer goes on to Stop
	stopping bool           // STOP_COPY: reads wait for data or the end
	done     chan struct{}  // closed when the producer has returned
	rep      precopy.Report // Stop's, once done
	liveEnd  atomic.Uint64  // the engine's BytesWritten + 1 when the live phase ended; 0 before
}

func (n *Device) startSave(live bool) error {
	if n.save != nil || n.load != nil {
		return fmt.Errorf("native: a save while another migration is in progress: %w", unix.EBUSY)
	}
	out := newMigBuffer(nativeBuffer)
	src, err := precopy.NewSource(n.VGPU, sink{out}, n.opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &saveSession{src: src, out: out, cancel: cancel, stopNow: make(chan struct{}), done: make(chan struct{})}
	if !live {
		close(s.stopNow)
		s.stopping = true
	}
	n.save = s
	go s.produce(ctx, n.VGPU, live)
	return nil
}

// produce runs the Source: the live phase (when live), a wait for
// STOP_COPY, the stop phase; out then ends with io.EOF or the error.
func (s *saveSession) produce(ctx context.Context, v *vgpu.VGPU, live bool) {
	defer close(s.done)
	var err error
	if live {
		err = s.src.Precopy(ctx)
		s.liveEnd.Store(v.Stats().BytesWritten + 1)
		s.out.pause()
		if err == nil {
			select {
			case <-s.stopNow:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
	}
	if err == nil {
		s.rep, err = s.src.Stop(ctx)
	}
	s.out.finish(err)
}

// stopCopy is PRE_COPY -> STOP_COPY: the VM has stopped.
func (n *Device) stopCopy() error {
	s := n.save
	if s == nil {
		return fmt.Errorf("native: STOP_COPY without a save: %w", unix.EINVAL)
	}
	n.Quiesce()
	close(s.stopNow)
	s.stopping = true
	return nil
}

// abort stops the producer and waits for it.
func (s *saveSession) abort() {
	s.cancel()
	s.out.finish(errAborted)
	<-s.done
}

// finishSave is STOP_COPY -> STOP. The vGPU stays quiesced either way;
// a save whose End was not read is rolled back (tracking stops).
func (n *Device) finishSave() error {
	s := n.save
	if s == nil {
		return nil
	}
	n.save = nil
	complete := s.out.drained()
	s.abort()
	if !complete {
		s.src.RollbackStopped()
		return nil
	}
	s.src.Close()
	n.report = s.rep
	n.log.Info().Dur("downtime_source", s.rep.Stop.Total).Int("dirty_pages", s.rep.Stop.DirtyPages).
		Msg("migration data read to the end; vGPU stays stopped")
	return nil
}

// endSave rolls back a save in progress, if any.
func (n *Device) endSave() {
	if s := n.save; s != nil {
		n.save = nil
		s.abort()
		s.src.Rollback()
	}
}

// loadSession is one resume: precopy.Receive on its consumer goroutine,
// reading what MigDataWrite writes into in.
type loadSession struct {
	in   *io.PipeWriter
	done chan struct{}  // closed when the consumer has returned
	rep  precopy.Report // once done
	err  error          // once done
}

func (n *Device) startLoad() error {
	if n.save != nil || n.load != nil {
		return fmt.Errorf("native: a resume while another migration is in progress: %w", unix.EBUSY)
	}
	r, w := io.Pipe()
	l := &loadSession{in: w, done: make(chan struct{})}
	n.load = l
	go l.consume(r, n.VGPU, n.opts)
	return nil
}

// consume runs precopy.Receive. After End it reads on to the end of the data:
// anything more is an error. When it fails, the pipe is closed with its
// error, so writes fail rather than wait.
func (l *loadSession) consume(r *io.PipeReader, v *vgpu.VGPU, opts precopy.Options) {
	defer close(l.done)
	rep, err := precopy.Receive(context.Background(), r, v, opts)
	if err == nil {
		if extra, _ := io.Copy(io.Discard, r); extra > 0 {
			err = fmt.Errorf("native: %w: %d bytes of migration data", stream.ErrTrailingData, extra)
		}
	}
	if err != nil {
		r.CloseWithError(err)
	}
	l.rep, l.err = rep, err
}

// finishLoad is RESUMING -> STOP: the data has ended. A failed resume
// stays (the FSM at RESUMING) until Reset.
func (n *Device) finishLoad() error {
	l := n.load
	if l == nil {
		return fmt.Errorf("native: STOP without a resume: %w", unix.EINVAL)
	}
	l.in.Close()
	<-l.done
	if l.err != nil {
		return l.err
	}
	n.load = nil
	n.report = l.rep
	n.log.Info().Dur("restore", l.rep.Stop.Restore).Dur("replay", l.rep.Stop.Replay).
		Msg("migration data loaded; vGPU stopped until RUNNING")
	return nil
}

// endLoad aborts a resume in progress (or failed), if any.
func (n *Device) endLoad() {
	if l := n.load; l != nil {
		n.load = nil
		l.in.CloseWithError(errAborted)
		<-l.done
	}
}
