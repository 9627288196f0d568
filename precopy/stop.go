package precopy

import (
	"context"
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// Stop is the stop phase; the caller has paused the VM. It quiesces the
// vGPU (the command in flight finishes; later doorbells wait), sends on
// the main stream what the destination attaches its VM with — GuestRAM
// (the guest RAM the device wrote), DeviceState (vgpu.State without what
// the API log carries), APILog (kernel objects, fence, interrupt state),
// FrontEnd (the guest's config writes), all final once the device is
// quiesced — then runs the final dirty scan (stop-and-copy: every page)
// and sends the dirty pages (device-local pages: exactly those the engine
// wrote, or those whose GPU hash changed, hashed beside the scan and read
// in chunks: local_stop.go) straight from the frozen memory — pipelined:
// the pages of each scanned chunk go out while the workers scan the next,
// with the hashes the scan computed (scanAndSend; Options.SerialStop
// scans everything first), on every stream AddStreams gave it — then a
// summary Meta and End on the main stream, and waits for the
// destination's verdict (not with NoVerdict: the report then lacks the
// destination's restore and replay times). On success the source vGPU
// stays quiesced and the Report has every term of the downtime; on error
// the caller calls Rollback.
func (s *Source) Stop(ctx context.Context) (Report, error) {
	if err := s.enter("Stop", false); err != nil {
		return Report{}, err
	}
	stop := s.watchAll(ctx)
	defer stop()
	s.mu.Lock()
	rep := s.report
	s.mu.Unlock()
	before := readProcCost()
	endProfile := startStopProfile(s.log, "source")
	err := s.stop(ctx, &rep)
	endProfile()
	cost := readProcCost().since(before)
	s.mu.Lock()
	s.report = rep
	if err == nil {
		s.state = srcStopped
	}
	s.mu.Unlock()
	if err != nil {
		return rep, s.fail(ctx, "stop", err)
	}
	st := rep.Stop
	s.log.Info().Dur("total", st.Total).Dur("quiesce", st.Quiesce).Dur("scan", st.Scan).
		Dur("transfer", st.Transfer).Dur("restore", st.Restore).Dur("replay", st.Replay).
		Int("dirty_pages", st.DirtyPages).Ints("by_source", st.BySource[:]).Uint64("bytes", st.Bytes).
		Int64("minor_faults", cost.minorFaults).Dur("sys_cpu", cost.sys).Dur("user_cpu", cost.user).Uint64("gcs", cost.gcs).
		Msg("migration stop phase done")
	return rep, nil
}

// stop does Stop's work, filling in rep as it goes.
func (s *Source) stop(ctx context.Context, rep *Report) error {
	t0 := time.Now()
	before := s.w.Stats()
	rep.Stop.Streams = s.streams()
	stopMeta := meta{Phase: phaseStop}
	if s.streams() > 1 {
		stopMeta.Streams, stopMeta.ShardToken = s.streams(), s.token
	}
	if err := writeMeta(s.w, stopMeta); err != nil {
		return err
	}

	t := time.Now()
	s.mu.Lock()
	if s.bgStop != nil {
		rep.Precopy.Background = s.bgStop()
		s.bgStop = nil
	}
	s.v.Quiesce()
	s.quiesced = true
	s.mu.Unlock()
	rep.Stop.Quiesce = time.Since(t)
	if s.opts.Quiesced != nil {
		s.opts.Quiesced()
	}

	// What the destination needs to attach the vGPU to its VM — the guest
	// RAM the device wrote, the device state and logs, the front end's
	// config writes — goes first: all of it is final once the device is
	// quiesced, and the destination may restore its VMM's front end while
	// the pages still come (Options.FrontEndArrived).
	t = time.Now()
	n, err := s.sendGuestRAM()
	if err != nil {
		return err
	}
	rep.Stop.GuestRAMPages = n
	if err := s.sendState(rep); err != nil {
		return err
	}
	stateSent := time.Since(t)

	t = time.Now()
	// The GPU hashes device-local memory while the CPU scans the
	// aperture (local_stop.go); with several streams the changed local
	// pages go out beside the aperture's.
	ls := s.startLocalStop()
	defer ls.wait() // nothing of it outlives the stop phase
	spreadLocal := s.streams() > 1 && ls != nil
	if s.pipelined() {
		scanned, err := s.scanAndSend(ctx, rep, ls)
		if err != nil {
			return err
		}
		rep.Stop.Scan = scanned.Sub(t)
		t = scanned
	} else {
		dirtyPages, err := s.finalScan(ctx, rep)
		if err != nil {
			return err
		}
		rep.Stop.Scan = time.Since(t)
		t = time.Now()
		if err := s.sendPages(ctx, dirtyPages, ls); err != nil {
			return err
		}
	}
	if err := s.verifyWriteLog(ctx, rep); err != nil {
		return err
	}
	if err := s.sendLocalStop(ctx, rep, ls, spreadLocal); err != nil {
		return err
	}
	rep.Stop.Transfer = stateSent + time.Since(t)
	rep.Stop.Bytes = s.w.Stats().Bytes - before.Bytes + s.shardBytes.Load()
	if err := writeMeta(s.w, meta{Phase: phaseSummary, Report: rep}); err != nil {
		return err
	}
	if err := s.w.Close(); err != nil {
		return err
	}
	rep.Stop.Transfer = stateSent + time.Since(t)
	rep.Stop.Bytes = s.w.Stats().Bytes - before.Bytes + s.shardBytes.Load()
	if s.opts.NoVerdict {
		rep.Stop.Total = time.Since(t0)
		return nil
	}

	var v verdictResult
	select {
	case v = <-s.verdict:
	case <-ctx.Done():
		return ctx.Err()
	}
	if v.err != nil {
		return v.err
	}
	if v.m.Report != nil {
		rep.Stop.Restore, rep.Stop.Replay = v.m.Report.Stop.Restore, v.m.Report.Stop.Replay
	}
	rep.Stop.Total = time.Since(t0)
	return nil
}

// finalScan returns the pages to send with the VM stopped.
func (s *Source) finalScan(ctx context.Context, rep *Report) ([]uint32, error) {
	if s.opts.Strategy == StopCopy {
		all := make([]uint32, s.tr.Pages())
		for i := range all {
			all[i] = uint32(i)
		}
		rep.Stop.DirtyPages = len(all)
		rep.Stop.BySource[dirty.Unrecorded] = len(all)
		return all, nil
	}
	res, err := s.tr.ScanFrozen(ctx) // VM stopped, engine quiesced: hash in place
	if err != nil {
		return nil, err
	}
	rep.Stop.DirtyPages, rep.Stop.BySource, rep.Stop.PagesHashed = len(res.Dirty), res.BySource, res.PagesHashed
	rep.Stop.WriteLog = res.WriteLog
	if secs := res.Duration.Seconds(); secs > 0 {
		rep.HashRate = float64(res.BytesHashed) / secs
	}
	idx := make([]uint32, len(res.Dirty))
	for i, p := range res.Dirty {
		idx[i] = uint32(p)
	}
	return idx, nil
}

// pipelined reports whether the stop phase overlaps the final scan with
// sending (scanAndSend), rather than scanning all of memory first: with
// at least PipelineMinWorkers hashing workers, unless Options.SerialStop
// asks for the serial one or a Hasher hashes the scan elsewhere in one
// batch.
func (s *Source) pipelined() bool {
	return !s.opts.SerialStop && s.opts.Hasher == nil && s.opts.Workers >= PipelineMinWorkers
}

// PipelineMinWorkers is the fewest hashing workers with which the stop
// phase is pipelined. Measured side by side with gmig-bench
// -compare-serial on a 1 GiB vGPU: on 16 cores the pipelined stop phase
// took 0.71–0.83 of the serial one's time; on 2 cores 1.4–2.9 times it
// (the sender, the frame builder and the scan workers contend for the two
// cores), so there the serial one is used.
const PipelineMinWorkers = 4

// scanAndSend is the pipelined final scan: the tracker's workers scan the
// frozen memory chunk by chunk (dirty.ScanFrozenStream), hashing every
// dirty page, while this goroutine (or, with extra streams, one sender per
// stream: spread) sends the dirty pages of each chunk straight from
// memory with those hashes (no copy, no hash on the send path); with
// extra streams, ls's device-local pages share them (readLocal).
// Stop-and-copy takes the same path: nothing was recorded, so every page
// is dirty (Unrecorded) and hashed by the workers. It returns
// when the last chunk was scanned: the downtime's scan term ends there,
// its transfer term is what was left to send after it.
func (s *Source) scanAndSend(ctx context.Context, rep *Report, ls *localStop) (scanned time.Time, err error) {
	start := time.Now()
	var res dirty.ScanResult
	scan := func(send func(idx []uint32, hashes []uint64) error) (err error) {
		res, err = s.tr.ScanFrozenStream(ctx, 0, func(c dirty.ScanChunk) error {
			return send(c.Dirty, c.Hashes)
		})
		return err
	}
	if s.streams() > 1 {
		err = s.spread(true, scan, s.spreadLocal(ctx, ls)) // the chunk's slices are reused
	} else {
		err = scan(func(idx []uint32, hashes []uint64) error {
			_, err := s.w.WritePages(idx, s.mem, hashes)
			s.noteSent()
			return err
		})
	}
	if err != nil {
		return time.Time{}, err
	}
	total := 0
	for _, n := range res.BySource {
		total += n
	}
	rep.Stop.DirtyPages, rep.Stop.BySource, rep.Stop.PagesHashed = total, res.BySource, res.PagesHashed
	rep.Stop.WriteLog = res.WriteLog
	if s.opts.Strategy == StopCopy {
		// Nothing was recorded: every page is Unrecorded, whatever
		// else marked it.
		rep.Stop.BySource = [dirty.NumSources]int{dirty.Unrecorded: total}
	}
	if secs := res.Duration.Seconds(); secs > 0 && res.BytesHashed > 0 {
		rep.HashRate = float64(res.BytesHashed) / secs
	}
	return start.Add(res.Duration), nil
}

// sendPages sends the dirty pages the serial final scan found, on every
// stream (each stream's writer copies and hashes its own), and with
// several streams the device-local pages ls finds beside them.
func (s *Source) sendPages(ctx context.Context, idx []uint32, ls *localStop) error {
	if s.streams() > 1 {
		all := func(send func([]uint32, []uint64) error) error { return send(idx, nil) }
		return s.spread(false, all, s.spreadLocal(ctx, ls))
	}
	_, err := s.w.WritePages(idx, s.mem, nil)
	s.noteSent()
	return err
}

// verifyWriteLog runs Options.VerifyWriteLog's oracle after the final
// scan (memory frozen): every page the write log let the scan skip is
// hashed, and one that changed fails the stop phase. Its time counts in
// the transfer term.
func (s *Source) verifyWriteLog(ctx context.Context, rep *Report) error {
	if !s.opts.VerifyWriteLog || !rep.Stop.WriteLog.Active {
		return nil
	}
	missed, err := s.tr.VerifyWriteLog(ctx)
	if err != nil {
		return err
	}
	if len(missed) > 0 {
		s.log.Error().Ints("pages", missed[:min(len(missed), 16)]).Int("missed", len(missed)).
			Str("tracking", rep.Tracking).Msg("the write log missed changed pages")
		return fmt.Errorf("%w: %d page(s), first %v", ErrWriteLogMissed, len(missed), missed[:min(len(missed), 16)])
	}
	rep.Stop.WriteLogVerified = true
	return nil
}

// sendState sends the device state, the API log and the front end's
// config writes (the dirty pages went before).
func (s *Source) sendState(rep *Report) error {
	m, err := s.v.SaveMigrated()
	if err != nil {
		return err
	}
	rep.APILog = m.Log
	blob, err := encodeState(m.State)
	if err != nil {
		return err
	}
	for _, sec := range []struct {
		t stream.SectionType
		b []byte
	}{
		{stream.DeviceState, blob},
		{stream.APILog, apilog.Encode(m.Device)},
		{stream.FrontEnd, apilog.Encode(m.FrontEnd)},
	} {
		if err := s.w.WriteBlob(sec.t, sec.b); err != nil {
			return fmt.Errorf("sending %v: %w", sec.t, err)
		}
	}
	return nil
}
