package precopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// FrontEnd takes the guest's PCI config writes on the destination, in the
// order the API log keeps them (command register last): the caller replays
// them into its QEMU, whose vfio-user front end does not migrate them.
type FrontEnd interface {
	WriteConfig(offset uint16, size uint8, value uint32) error
}

// Receive is the destination of one migration. It reads the stream from
// conn; at the begin Meta it creates the vGPU in a new partition of
// args.Pool (quiesced, and at this host's offset: the shadow GTT is rebuilt
// against it when the state is restored — Dynamic Graphics Address
// Remapping), writes every page straight into that partition as it
// arrives, and after End replays the API log into the device state
// (kernel objects, FENCE_DONE, interrupt registers), restores the state,
// records the replayed entries in the new vGPU's own API log (so it can
// migrate again), and passes the config writes to fe (nil: skip; they
// stay in the new vGPU's API log for a later replay). Then it sends its
// verdict and returns the vGPU, still quiesced: the caller resumes it when
// the VM runs, or closes it if the migration fails after all (for
// instance if the source never saw the verdict).
//
// On any error the vGPU is closed (its partition freed), the error is sent
// to the source as a refusal, conn is read until the source closes it (so
// the refusal is not lost to a reset), and Receive returns the error.
// Bound ctx: it also bounds that wait.
func Receive(ctx context.Context, conn io.ReadWriter, args vgpu.RestoreArgs, fe FrontEnd) (*vgpu.VGPU, Report, error) {
	return ReceiveAdopt(ctx, conn, args, fe, nil)
}

// ReceiveAdopt is Receive with a last check before the verdict: adopt is
// given the restored vGPU (still quiesced) and may take it into service —
// name it, serve its socket — or refuse it. A refusal is sent to the source
// as the destination's, so the source keeps running; once the source has
// read a success verdict it may discard its vGPU, so anything that can fail
// on the destination belongs in adopt, not after Receive returns. If the
// verdict cannot be sent after adopt accepted, Receive still fails and
// closes the vGPU: adopt's owner must then drop it too.
func ReceiveAdopt(ctx context.Context, conn io.ReadWriter, args vgpu.RestoreArgs, fe FrontEnd, adopt func(*vgpu.VGPU) error) (*vgpu.VGPU, Report, error) {
	d := &dest{conn: conn, verdict: conn, args: args, fe: fe, log: args.Log, adopt: adopt}
	if err := d.run(ctx); err != nil {
		if d.v != nil { // the verdict could not be sent after all
			if cerr := d.v.Close(); cerr != nil {
				d.log.Error().Err(cerr).Msg("discarding the destination vGPU")
			}
		}
		d.log.Warn().Err(err).Msg("migration refused; destination vGPU discarded")
		return nil, d.rep, err
	}
	return d.v, d.rep, nil
}

// ReceiveInto is Receive into v, a vGPU that already exists on this host
// with the source's memory size and GTT entries (as a VMM's destination
// device does: created before the migration, with the same config). v is
// quiesced at the begin Meta and its memory, state and API log are
// replaced by the source's; on success it stays quiesced for the caller to
// resume. The verdict is sent on conn, which must then also be an
// io.Writer, unless opts.NoVerdict; opts.Log is the only other field used.
//
// On error v is not closed: it stays quiesced, its memory partly
// overwritten (its state is replaced only after End, whole or not at
// all), and its owner resets or discards it. With a verdict, the refusal
// is sent and conn drained as Receive does.
func ReceiveInto(ctx context.Context, conn io.Reader, v *vgpu.VGPU, fe FrontEnd, opts Options) (Report, error) {
	d := &dest{conn: conn, into: v, args: vgpu.RestoreArgs{Config: v.Config(), Log: opts.Log}, fe: fe, log: opts.Log}
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
	err := d.receive(ctx)
	if err == nil && d.adopt != nil {
		if err = d.adopt(d.v); err != nil {
			err = fmt.Errorf("precopy: the destination host refused the vGPU: %w", err)
		}
	}
	if err == nil {
		if d.verdict != nil {
			err = writeVerdict(d.verdict, meta{OK: true, Report: &d.rep})
		}
		if err == nil {
			d.log.Info().Uint64("pool_offset", d.v.Partition().Offset).Dur("restore", d.rep.Stop.Restore).
				Dur("replay", d.rep.Stop.Replay).Int("stop_pages", d.rep.Stop.DirtyPages).
				Msg("migration received; vGPU quiesced until the VM runs")
			return nil
		}
		return fmt.Errorf("precopy: %w", err)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("precopy: receiving: %w (%v)", ctx.Err(), err)
	}
	// A vGPU this Receive created is discarded before the source hears the
	// refusal, so by then nothing of the migration is left here.
	if d.into == nil && d.v != nil {
		if cerr := d.v.Close(); cerr != nil {
			d.log.Error().Err(cerr).Msg("discarding the destination vGPU")
		}
		d.v = nil
	}
	if d.verdict != nil {
		if verr := writeVerdict(d.verdict, meta{Error: err.Error()}); verr == nil && ctx.Err() == nil {
			_, _ = io.Copy(io.Discard, d.conn)
		}
	}
	return err
}

// dest is one Receive's state.
type dest struct {
	conn    io.Reader
	verdict io.Writer  // nil: no verdict
	into    *vgpu.VGPU // ReceiveInto's vGPU; nil: create one
	adopt   func(*vgpu.VGPU) error
	args    vgpu.RestoreArgs
	fe      FrontEnd
	log     zerolog.Logger

	v   *vgpu.VGPU
	rep Report

	stopAt                  time.Time // when the stop Meta arrived
	stopped                 bool
	state, devLog, frontEnd []byte
	sawDevLog, sawFrontEnd  bool
	summary                 *Report
}

// receive reads the stream and restores the vGPU into d.v.
func (d *dest) receive(ctx context.Context) error {
	r, err := stream.NewReader(d.conn, stream.Limits{MaxBlob: maxStateBlob})
	if err != nil {
		return fmt.Errorf("precopy: %w", err)
	}
	if err := d.begin(r); err != nil {
		return err
	}
	mem := d.v.Memory()
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
	}
	if err := d.restore(); err != nil {
		return err
	}
	d.merge()
	d.rep.Stop.Total = time.Since(d.stopAt)
	return nil
}

// begin reads the begin Meta and creates the destination vGPU.
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
	cfg := d.args.Config
	if (cfg.MemSize != 0 && cfg.MemSize != m.MemSize) || (cfg.GTTEntries != 0 && cfg.GTTEntries != m.GTTEntries) {
		return fmt.Errorf("precopy: source vGPU has %d bytes and %d GTT entries, destination config %d and %d",
			m.MemSize, m.GTTEntries, cfg.MemSize, cfg.GTTEntries)
	}
	if m.MemSize == 0 || m.GTTEntries == 0 {
		return fmt.Errorf("precopy: begin Meta without memory size or GTT entries")
	}
	cfg.MemSize, cfg.GTTEntries = m.MemSize, m.GTTEntries
	if cfg.Name == "" {
		cfg.Name = m.Name
	}
	d.log = d.log.With().Str("vgpu", cfg.Name).Str("strategy", string(d.rep.Strategy)).Logger()
	v := d.into
	if v == nil {
		if v, err = vgpu.New(cfg, d.args.Pool, d.args.Log); err != nil {
			return fmt.Errorf("precopy: creating the destination vGPU: %w", err)
		}
	}
	v.Quiesce()
	d.v = v
	if err := populate(v.Memory(), true); err != nil {
		d.log.Warn().Err(err).Msg("populating the destination partition; pages fault in as they arrive")
	}
	d.log.Info().Str("source_name", m.Name).Uint64("mem_size", m.MemSize).
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
			d.stopped, d.stopAt = true, time.Now()
			d.rep.Precopy.Bytes = st.Bytes
		case m.Phase == phaseSummary && m.Report != nil && d.summary == nil:
			d.summary = m.Report
		default:
			return fmt.Errorf("precopy: unexpected Meta phase %q", m.Phase)
		}
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
	d.rep.Stop.BySource, d.rep.Stop.PagesHashed = s.Stop.BySource, s.Stop.PagesHashed
	d.rep.HashRate, d.rep.APILog = s.HashRate, s.APILog
}

// restore replays the logs into the received state, restores it and
// records the replayed entries in the new vGPU's API log.
func (d *dest) restore() error {
	t := time.Now()
	st, err := decodeState(d.state)
	if err != nil {
		return err
	}
	restore := time.Since(t)

	t = time.Now()
	device, err := apilog.Decode(d.devLog)
	if err != nil {
		return fmt.Errorf("precopy: APILog section: %w", err)
	}
	frontEnd, err := apilog.Decode(d.frontEnd)
	if err != nil {
		return fmt.Errorf("precopy: FrontEnd section: %w", err)
	}
	if err := apilog.Replay(device, &stateTarget{st: &st}); err != nil {
		return fmt.Errorf("precopy: replaying the API log: %w", err)
	}
	sortKernels(st.Engine.Kernels)
	replay := time.Since(t)

	t = time.Now()
	if err := d.v.Restore(st); err != nil {
		return fmt.Errorf("precopy: restoring the device: %w", err)
	}
	restore += time.Since(t)

	t = time.Now()
	if err := apilog.Replay(frontEnd, frontEndTarget{d.fe}); err != nil {
		return fmt.Errorf("precopy: replaying the front end's config writes: %w", err)
	}
	l := d.v.APILog()
	l.Reset() // ReceiveInto: the vGPU's own objects are gone (its config writes stay, by offset)
	for _, es := range [][]apilog.Entry{device, frontEnd} {
		for _, e := range es {
			l.Record(e)
		}
	}
	replay += time.Since(t)
	d.rep.Stop.Restore, d.rep.Stop.Replay = restore, replay
	return nil
}
