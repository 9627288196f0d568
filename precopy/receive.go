package precopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// Receive is the destination of one migration, into v: a vGPU that already
// exists on this host, created by the caller with the source's memory size
// and GTT entries and, usually, already attached to the destination VMM
// (which needs its device before it starts). v is quiesced first, so it
// is quiesced whenever Receive returns; every page is written straight
// into its memory as it arrives (at this host's pool offset: the shadow
// GTT is rebuilt against it when the state is restored — Dynamic Graphics
// Address Remapping); after End the API log is replayed into the received
// state, the state restored and the log recorded in v's own API log, so v
// describes itself as the source did and can migrate again. The guest's
// config writes are among them (v.ConfigWrites): the caller gives them to
// its VMM's front end.
//
// Then the verdict is sent on conn, which must also be an io.Writer,
// unless opts.NoVerdict. A stop phase spread over several streams takes
// the extra ones from opts.NextStream (at most opts.Streams in all; 0:
// stream.MaxShards); without it such a stream is refused. opts.Log is the
// only other field used. The
// verdict is a promise, not a commit: on success v stays quiesced until
// the caller resumes it when the VM runs here, or discards it if the
// migration fails later (the orchestrator's commit decides).
//
// On error v stays quiesced, its memory partly overwritten (its state is
// replaced only after End, whole or not at all); its owner discards or
// resets it. With a verdict, the refusal is sent and conn read until the
// source closes it, so the refusal is not lost to a TCP reset; bound ctx,
// it also bounds that wait.
func Receive(ctx context.Context, conn io.Reader, v *vgpu.VGPU, opts Options) (Report, error) {
	v.Quiesce()
	d := &dest{conn: conn, v: v, log: opts.Log, nextStream: opts.NextStream, maxStreams: opts.Streams, released: opts.Released,
		frontEndArrived: opts.FrontEndArrived}
	if d.maxStreams == 0 {
		d.maxStreams = stream.MaxShards
	}
	if !opts.NoVerdict {
		w, ok := conn.(io.Writer)
		if !ok {
			return Report{}, errors.New("precopy: a verdict needs a connection that writes (or NoVerdict)")
		}
		d.verdict = w
	}
	if err := d.run(ctx); err != nil {
		d.log.Warn().Err(err).Msg("migration refused; destination vGPU left quiesced")
		return d.rep, err
	}
	return d.rep, nil
}

// run receives the stream and answers it with the verdict, if any.
func (d *dest) run(ctx context.Context) error {
	stop := watch(ctx, d.conn)
	defer stop()
	defer func() {
		if d.endProfile != nil {
			d.endProfile()
		}
	}()
	err := d.receive(ctx)
	if err == nil {
		if d.verdict != nil {
			err = writeVerdict(d.verdict, meta{OK: true, Report: &d.rep})
		}
		if err == nil {
			var cost procCost // this process's, in the stop phase
			if d.stopped {
				cost = readProcCost().since(d.stopCost)
			}
			d.log.Info().Uint64("pool_offset", d.v.Partition().Offset).Dur("restore", d.rep.Stop.Restore).
				Dur("replay", d.rep.Stop.Replay).Int("stop_pages", d.rep.Stop.DirtyPages).
				Int("local_pages_to_gpu", d.local.loadedPages()).Dur("local_load", d.rep.Stop.LocalLoad).
				Dur("local_load_early", d.rep.Stop.LocalLoadEarly).Int("local_pages_early", d.rep.Stop.LocalPagesEarly).
				Int64("minor_faults", cost.minorFaults).Dur("sys_cpu", cost.sys).Dur("user_cpu", cost.user).Uint64("gcs", cost.gcs).
				Msg("migration received; vGPU quiesced until the VM runs")
			// The stop phase's local pages are on the GPU now: their
			// host memory goes back in the background, off the VM's
			// way to its resume (vgpu.DiscardLocal refuses once the
			// vGPU is closed, so a discarded destination is safe).
			go func() {
				d.local.release()
				if d.released != nil {
					d.released()
				}
			}()
			return nil
		}
		return fmt.Errorf("precopy: %w", err)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("precopy: receiving: %w (%v)", ctx.Err(), err)
	}
	if d.verdict != nil {
		if verr := writeVerdict(d.verdict, meta{Error: err.Error()}); verr == nil && ctx.Err() == nil {
			_, _ = io.Copy(io.Discard, d.conn)
		}
	}
	return err
}

// receiveWorkers is how many goroutines check and store received pages
// (stream.Reader.SetWorkers) while one reads the connection: a few cores'
// worth of hashing keeps up with a loopback or 25 Gb/s link.
var receiveWorkers = min(4, max(2, runtime.GOMAXPROCS(0)/2))

// dest is one Receive's state.
type dest struct {
	local    *localSink // device-local pages bound for the GPU; nil without
	released func()     // Options.Released
	// frontEndArrived is Options.FrontEndArrived.
	frontEndArrived func([]apilog.Entry, *GuestRAM)
	conn            io.Reader
	verdict         io.Writer // nil: no verdict
	v               *vgpu.VGPU
	log             zerolog.Logger

	nextStream func(context.Context) (io.Reader, error) // Options.NextStream
	maxStreams int
	cancel     context.CancelCauseFunc // ends receive's ctx (an extra stream failed)
	shards     *shardsIn               // the stop phase's extra streams, once started
	stopMeta   *meta                   // a stop Meta whose extra streams are to start

	rep Report

	stopAt                  time.Time // when the stop Meta arrived
	stopCost                procCost  // this process's counters then
	endProfile              func()    // ends the stop phase's profile (StopProfileEnv); nil before the stop
	stopped                 bool
	state, devLog, frontEnd []byte
	frontEndEntries         []apilog.Entry // frontEnd decoded, once decoded (FrontEndArrived)
	sawDevLog, sawFrontEnd  bool
	summary                 *Report
}

// receive reads the stream and restores the vGPU into d.v.
func (d *dest) receive(ctx context.Context) (err error) {
	outer := ctx
	ctx, d.cancel = context.WithCancelCause(ctx)
	// An extra stream's failure cuts the main stream's read short; the
	// connection stays writable for the refusal (run).
	stop := watchReads(ctx, d.conn)
	defer func() {
		stop()
		d.cancel(nil)
		// Nothing writes the vGPU once we return.
		if werr := d.waitShards(); err == nil {
			err = werr
		}
		// An extra stream's failure is why the main one was cut.
		if serr := d.shards.failed(); serr != nil && outer.Err() == nil {
			err = serr
		}
		// No reader stores any more: the loader may end (on success
		// restore waited for it already).
		d.local.stopLoader()
		if lerr := d.local.loadFailed(); lerr != nil && outer.Err() == nil {
			err = lerr // why the streams were cut
		}
	}()
	r, err := stream.NewReader(d.conn, stream.Limits{MaxBlob: maxStateBlob})
	if err != nil {
		return fmt.Errorf("precopy: %w", err)
	}
	// Pages are checked and stored on other goroutines while the
	// connection is read on; none may write the vGPU after we return.
	r.SetWorkers(receiveWorkers)
	defer r.Wait()
	if err := d.begin(r); err != nil {
		return err
	}
	mem := d.v.DeviceMemory() // graphics pages, then device-local pages
	if d.local = newLocalSink(d.v, d.log); d.local != nil {
		r.SetClaim(d.local.claim(nil)) // local pages go on to the GPU (local_dest.go)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		sec, err := r.Next(mem)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("precopy: %w", err)
		}
		if err := d.section(sec, r.Stats()); err != nil {
			return err
		}
		if !d.stopped && d.local.due() {
			if err := r.Wait(); err != nil {
				return fmt.Errorf("precopy: %w", err)
			}
			if err := d.local.flush(); err != nil {
				return err
			}
		}
		if m := d.stopMeta; m != nil {
			d.stopMeta = nil
			if err := d.startLocalLoads(r); err != nil {
				return err
			}
			if err := d.startShards(ctx, r, *m); err != nil {
				return err
			}
		}
	}
	if err := d.waitShards(); err != nil {
		return err
	}
	if err := r.Wait(); err != nil { // every page stored (restore loads local ones)
		return fmt.Errorf("precopy: %w", err)
	}
	if d.state == nil || !d.sawDevLog || !d.sawFrontEnd {
		return errors.New("precopy: stream ended without DeviceState, APILog and FrontEnd")
	}
	if !d.stopped {
		d.stopAt = time.Now()
	}
	if d.stopped {
		st := r.Stats()
		d.rep.Stop.Bytes = st.Bytes - d.rep.Precopy.Bytes
		if d.shards != nil {
			d.rep.Stop.Bytes += d.shards.bytes.Load()
		}
	}
	if s := d.summary; s != nil && s.Stop.DirtyPages != d.rep.Stop.DirtyPages {
		return fmt.Errorf("precopy: the source sent %d pages in the stop phase, %d arrived", s.Stop.DirtyPages, d.rep.Stop.DirtyPages)
	}
	if err := d.restore(); err != nil {
		return err
	}
	d.merge()
	d.rep.Stop.Total = time.Since(d.stopAt)
	return nil
}

// startLocalLoads starts loading the stop phase's device-local pages to
// the GPU as they are stored (local_load.go), the pre-copy's leftover
// first: r, the main stream's reader, is waited for, so that it is
// stored.
func (d *dest) startLocalLoads(r *stream.Reader) error {
	if d.local == nil {
		return nil
	}
	if err := r.Wait(); err != nil {
		return fmt.Errorf("precopy: %w", err)
	}
	d.local.startLoader(d.cancel)
	r.SetClaim(d.local.stopClaim(nil))
	r.SetStored(d.local.stored)
	return nil
}

// begin reads the begin Meta and checks it against the destination vGPU.
func (d *dest) begin(r *stream.Reader) error {
	sec, err := r.Next(nil)
	if err != nil {
		return fmt.Errorf("precopy: reading the begin Meta: %w", err)
	}
	if sec.Type != stream.Meta {
		return fmt.Errorf("precopy: stream opens with %v, want Meta", sec.Type)
	}
	m, err := parseMeta(sec.Blob)
	if err != nil {
		return err
	}
	if m.Phase != phaseBegin || m.StateEncoding != stateEncoding {
		return fmt.Errorf("precopy: first Meta has phase %q and state encoding %q, want %q and %q",
			m.Phase, m.StateEncoding, phaseBegin, stateEncoding)
	}
	if d.rep.Strategy, err = ParseStrategy(string(m.Strategy)); err != nil {
		return err
	}
	if m.VGPU == nil {
		return errors.New("precopy: the begin Meta does not describe the source's vGPU (a gmigd before the vGPU spec crossed)")
	}
	if err := d.v.Is(*m.VGPU); err != nil {
		return fmt.Errorf("precopy: the source's vGPU: %w", err)
	}
	d.log = d.log.With().Str("vgpu", d.v.Name()).Str("strategy", string(d.rep.Strategy)).Logger()
	if m.DeviceAddrBase != 0 {
		// Where the restore must put local memory, put it now: moving
		// it is a remapping of all of it (2.5 ms for 16 GiB on the
		// H200). Where this GPU cannot, the restore tries again and
		// refuses the migration then.
		if err := d.v.PlaceLocal(m.DeviceAddrBase); err != nil {
			d.log.Warn().Err(err).Uint64("device_addr_base", m.DeviceAddrBase).Msg("device-local memory not placed at the source's address before the pre-copy")
		}
	}
	if err := populate(d.v.Memory(), true); err != nil {
		d.log.Warn().Err(err).Msg("populating the destination partition; pages fault in as they arrive")
	}
	v := d.v
	d.log.Info().Str("source_name", m.Name).Uint64("mem_size", m.VGPU.MemSize).Str("backend", m.VGPU.Backend).
		Uint64("pool_offset", v.Partition().Offset).Msg("migration incoming")
	return nil
}

// section takes one section after the begin Meta; st is the reader's
// running count.
func (d *dest) section(sec stream.Section, st stream.Stats) error {
	switch sec.Type {
	case stream.PageBatch:
		if d.stopped {
			d.rep.Stop.DirtyPages += sec.Pages
		} else {
			d.rep.Precopy.Pages += uint64(sec.Pages)
			d.rep.Precopy.ZeroPages += uint64(sec.ZeroPages)
			d.rep.Precopy.Rounds = max(d.rep.Precopy.Rounds, 1)
		}
	case stream.Meta:
		m, err := parseMeta(sec.Blob)
		if err != nil {
			return err
		}
		switch {
		case m.Phase == phaseStop && !d.stopped:
			d.stopped, d.stopAt, d.stopCost = true, time.Now(), readProcCost()
			d.endProfile = startStopProfile(d.log, "destination")
			d.rep.Precopy.Bytes = st.Bytes
			d.stopMeta = &m
		case m.Phase == phaseSummary && m.Report != nil && d.summary == nil:
			d.summary = m.Report
		default:
			return fmt.Errorf("precopy: unexpected Meta phase %q", m.Phase)
		}
	case stream.GuestRAM:
		if !d.stopped {
			return fmt.Errorf("precopy: a %v section before the stop", sec.Type)
		}
		if d.rep.GuestRAM == nil {
			d.rep.GuestRAM = &GuestRAM{}
		}
		if err := d.rep.GuestRAM.add(sec.Blob); err != nil {
			return err
		}
		d.rep.Stop.GuestRAMPages = d.rep.GuestRAM.Ranges()
	case stream.DeviceState:
		d.state = sec.Blob
	case stream.APILog, stream.FrontEnd:
		seen, blob := &d.sawDevLog, &d.devLog
		if sec.Type == stream.FrontEnd {
			seen, blob = &d.sawFrontEnd, &d.frontEnd
		}
		if *seen {
			return fmt.Errorf("precopy: a second %v section", sec.Type)
		}
		*seen, *blob = true, sec.Blob
		if sec.Type == stream.FrontEnd && d.stopped && d.frontEndArrived != nil {
			entries, err := apilog.Decode(sec.Blob)
			if err != nil {
				return fmt.Errorf("precopy: FrontEnd section: %w", err)
			}
			d.frontEndEntries = entries
			d.frontEndArrived(entries, d.rep.GuestRAM) // the guest RAM came before it, on this stream
		}
	}
	return nil
}

// merge completes the destination's report with the source's summary.
func (d *dest) merge() {
	s := d.summary
	if s == nil {
		return
	}
	d.rep.Precopy.Duration, d.rep.Precopy.Rounds, d.rep.Precopy.Background = s.Precopy.Duration, s.Precopy.Rounds, s.Precopy.Background
	d.rep.Stop.Quiesce, d.rep.Stop.Scan, d.rep.Stop.Transfer = s.Stop.Quiesce, s.Stop.Scan, s.Stop.Transfer
	d.rep.Stop.BySource, d.rep.Stop.PagesHashed, d.rep.Stop.Streams = s.Stop.BySource, s.Stop.PagesHashed, s.Stop.Streams
	d.rep.Stop.LocalPages, d.rep.Stop.LocalMethod = s.Stop.LocalPages, s.Stop.LocalMethod
	d.rep.HashRate, d.rep.APILog = s.HashRate, s.APILog
}

// restore replays the API log into the received state, restores it and
// records the log in the vGPU's own.
func (d *dest) restore() error {
	t := time.Now()
	st, err := decodeState(d.state)
	if err != nil {
		return err
	}
	restore := time.Since(t)

	t = time.Now()
	m := vgpu.Migrated{State: st}
	if m.Device, err = apilog.Decode(d.devLog); err != nil {
		return fmt.Errorf("precopy: APILog section: %w", err)
	}
	if m.FrontEnd = d.frontEndEntries; m.FrontEnd == nil {
		m.FrontEnd, err = apilog.Decode(d.frontEnd)
	}
	if err != nil {
		return fmt.Errorf("precopy: FrontEnd section: %w", err)
	}
	if err := vgpu.ApplyLog(&m.State, m.Device); err != nil {
		return fmt.Errorf("precopy: %w", err)
	}
	replay := time.Since(t)

	t = time.Now()
	// The stop phase's local pages, to the GPU: what the loader has not
	// loaded yet; their host pages are released after the verdict (run),
	// outside the downtime.
	early, earlyPages, err := d.local.finishLoads()
	if err != nil {
		return err
	}
	d.rep.Stop.LocalLoad, d.rep.Stop.LocalLoadEarly, d.rep.Stop.LocalPagesEarly = time.Since(t), early, earlyPages
	if err := d.v.RestoreMigrated(m); err != nil {
		return fmt.Errorf("precopy: restoring the device: %w", err)
	}
	restore += time.Since(t)
	d.rep.Stop.Restore, d.rep.Stop.Replay = restore, replay
	return nil
}
