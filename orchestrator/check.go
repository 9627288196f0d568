package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/precopy"
)

// A dry run (gmigd migrate --dry-run) asks the destination whether the
// migration would land there, on a connection of its own (hello kind
// "check"): the source sends the Prepare it would send, the destination
// answers checkResult without reserving or starting anything, then the
// source sends probeSize bytes and the destination acknowledges them
// (probed), which measures the link. The source adds an estimate of the
// stop phase from a dirty sample of its vGPU and that link
// (docs/migration-protocol.md, "Dry run").

// ErrCheckFailed is a dry run whose destination said the migration would
// not land; the CheckReport says why.
var ErrCheckFailed = errors.New("orchestrator: the destination's check failed")

// Checker is a Host that can say whether a migration would land without
// landing it.
type Checker interface {
	// Check checks what Land would need for p (room in the pool for
	// p.VGPU, its back end, the VMM and the VM's machine) and reserves
	// nothing.
	Check(ctx context.Context, p Prepare) []CheckItem
}

// CheckItem is one thing a destination checked.
type CheckItem struct {
	What   string `json:"what"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type checkResult struct {
	Items []CheckItem `json:"items"`
}

type probed struct {
	Bytes int64 `json:"bytes"`
}

// probeSize is the dry run's link probe: 8 MiB takes about 2 ms on one
// loopback TCP stream here (4.5 GB/s, DESIGN.md), long against a
// round trip on a LAN.
const probeSize = 8 << 20

// sampleInterval is how long a dry run watches the vGPU's memory for its
// dirty rate: two progress periods.
const sampleInterval = 2 * progressPeriod

// CheckReport is a dry run's answer.
type CheckReport struct {
	ID       string      `json:"id"`
	Peer     string      `json:"peer"`
	Items    []CheckItem `json:"items"`
	OK       bool        `json:"ok"`
	Estimate Estimate    `json:"estimate"`
}

// String is the report as lines of text.
func (r CheckReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dry run against %s:\n", r.Peer)
	for _, it := range r.Items {
		mark := "ok  "
		if !it.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %-14s %s\n", mark, it.What, it.Detail)
	}
	fmt.Fprintf(&b, "  %s\n", r.Estimate)
	if r.OK {
		fmt.Fprintf(&b, "the migration would land; nothing was moved\n")
	} else {
		fmt.Fprintf(&b, "the migration would be refused; nothing was moved\n")
	}
	return b.String()
}

// Check is a dry run of Migrate(ctx, s): it asks the destination whether
// the migration would land, measures the link and the vGPU's dirty rate,
// and estimates the stop phase; it moves nothing, reserves nothing at the
// destination and leaves the VM and the vGPU as they are. A destination
// that says no gives ErrCheckFailed with the report.
func Check(ctx context.Context, s Source) (CheckReport, error) {
	t := s.Timeouts.withDefaults()
	if s.Transport == nil {
		s.Transport = TCP{}
	}
	name := s.Name
	if name == "" {
		name = s.VGPU.Name()
	}
	id := newID()
	rep := CheckReport{ID: id, Peer: s.Peer}
	c, err := dialHello(ctx, s.Transport, s.Peer, hello{Version: ProtocolVersion, Kind: kindCheck, ID: id}, t.Message)
	if err != nil {
		return rep, fmt.Errorf("orchestrator: dry run: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	strategy := s.Precopy.Strategy
	if strategy == "" {
		strategy = precopy.OneShot
	}
	p := Prepare{ID: id, Name: name, VGPU: s.VGPU.Spec(), VMKind: s.VMKind, VM: s.VMSpec, Strategy: strategy}
	var res checkResult
	if err := exchange(c, t.Message, p, &res); err != nil {
		return rep, fmt.Errorf("orchestrator: dry run: %w", err)
	}
	rep.Items, rep.OK = res.Items, len(res.Items) > 0
	for _, it := range res.Items {
		rep.OK = rep.OK && it.OK
	}
	link, err := probeLink(c, t.Message)
	if err != nil {
		return rep, fmt.Errorf("orchestrator: dry run: measuring the link: %w", err)
	}
	if rep.Estimate, err = sampleEstimate(ctx, s, link); err != nil {
		return rep, fmt.Errorf("orchestrator: dry run: %w", err)
	}
	s.Log.Info().Str("migration", id).Str("peer", s.Peer).Bool("ok", rep.OK).
		Dur("estimate", rep.Estimate.Total).Msg("dry run")
	if !rep.OK {
		return rep, fmt.Errorf("%w: %s", ErrCheckFailed, failed(rep.Items))
	}
	return rep, nil
}

// failed lists the failed items' details.
func failed(items []CheckItem) string {
	var out []string
	for _, it := range items {
		if !it.OK {
			out = append(out, it.What+": "+it.Detail)
		}
	}
	if len(out) == 0 {
		return "the destination checked nothing"
	}
	return strings.Join(out, "; ")
}

// probeLink sends probeSize bytes and returns the rate at which the
// destination acknowledged them, in bytes/s.
func probeLink(c net.Conn, timeout time.Duration) (float64, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	buf := make([]byte, 1<<20)
	start := time.Now()
	for sent := 0; sent < probeSize; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
	}
	var ack probed
	if err := readMsg(c, &ack); err != nil {
		return 0, err
	}
	if ack.Bytes != probeSize {
		return 0, fmt.Errorf("orchestrator: the destination read %d of %d probe bytes", ack.Bytes, probeSize)
	}
	return probeSize / time.Since(start).Seconds(), nil
}

// sampleEstimate estimates the stop phase from a dirty sample of the
// vGPU's memory over sampleInterval (a tracker of its own: the vGPU is not
// claimed) and the link.
func sampleEstimate(ctx context.Context, s Source, link float64) (Estimate, error) {
	tr, err := dirty.New(s.VGPU.Memory(), dirty.Options{Workers: s.Precopy.Workers, Log: s.Log})
	if err != nil {
		return Estimate{}, fmt.Errorf("dirty sample: %w", err)
	}
	if err := tr.RecordAll(ctx); err != nil {
		return Estimate{}, fmt.Errorf("dirty sample: %w", err)
	}
	start := time.Now()
	select {
	case <-time.After(sampleInterval):
	case <-ctx.Done():
		return Estimate{}, ctx.Err()
	}
	res, err := tr.Scan(ctx)
	if err != nil {
		return Estimate{}, fmt.Errorf("dirty sample: %w", err)
	}
	var vmm time.Duration
	if de, ok := s.VM.(DowntimeExpecter); ok {
		vmm = de.ExpectedDowntime()
	}
	r := precopy.RoundResult{Dirty: len(res.Dirty), Interval: time.Since(start), Scan: res.Duration}
	return estimate(r, 0, tr.Pages(), link, vmm), nil
}

// check answers a dry run on its connection: the host's checks of the
// Prepare, then the probe's acknowledgement.
func (d *Destination) check(ctx context.Context, c net.Conn, id string) {
	log := d.log.With().Str("migration", id).Logger()
	t := d.opts.Timeouts
	_ = c.SetDeadline(time.Now().Add(t.Message))
	var p Prepare
	if err := readMsg(c, &p); err != nil {
		log.Warn().Err(err).Msg("dry run without a Prepare; closed")
		return
	}
	var res checkResult
	if ch, ok := d.host.(Checker); ok {
		cctx, cancel := context.WithTimeout(ctx, t.Message)
		res.Items = ch.Check(cctx, p)
		cancel()
	} else {
		res.Items = []CheckItem{{What: "dry run", Detail: "this destination cannot check a migration"}}
	}
	if err := writeMsg(c, res); err != nil {
		log.Warn().Err(err).Msg("answering a dry run")
		return
	}
	n, err := io.CopyN(io.Discard, c, probeSize)
	if err != nil {
		log.Warn().Err(err).Int64("read", n).Msg("a dry run's link probe")
		return
	}
	_ = writeMsg(c, probed{Bytes: n})
	log.Info().Str("vgpu", p.Name).Interface("checks", res.Items).Msg("dry run answered")
}
