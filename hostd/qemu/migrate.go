package qemu

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/orchestrator"
)

// QEMU's own migration beside the vGPU's (docs/migration-protocol.md): the
// source migrates with pause-before-switchover, so QEMU stops the VM when
// its RAM pre-copy converges and then waits in "pre-switchover" while gmigd
// runs the vGPU's stop phase; migrate-continue lets it finish. The
// destination is started with -incoming defer and -S and stays paused
// after the load until gmigd has restored the vGPU's front end.

// DefaultMaxBandwidth is the RAM migration bandwidth gmigd sets unless told
// otherwise: QEMU's own default (128 MiB/s) is a throttle meant for shared
// links, far below what a dedicated migration link carries.
const DefaultMaxBandwidth = 10 << 30 // bytes/s

// DefaultDowntimeLimit is the downtime-limit gmigd gives QEMU unless told
// otherwise. QEMU stops the VM for its switchover once its dirty RAM fits
// downtime-limit at the bandwidth it measured over the last 100 ms. With
// QEMU's own 300 ms that threshold swallowed everything the guest dirtied
// during the first pass (4-20 MiB, one pass on every hop under TCG), and it
// grew on a source QEMU that had itself loaded a migration: the load
// leaves its shared-memfd RAM fully populated (RssShmem 525 MB against 135
// MB on a freshly booted one), its first pass runs faster, QEMU measures a
// higher bandwidth (1.1-1.7 Gbit/s against 0.3-0.9) and stops at once with
// more RAM to send while the VM is paused. 20 ms keeps that remainder small
// on every hop (docs/operator-guide.md, "QEMU's RAM at the stop").
const DefaultDowntimeLimit = 20 * time.Millisecond

// Outgoing is a VM at a migration's source, as the orchestrator drives it
// (orchestrator.SourceVM).
type Outgoing struct {
	VM *VM
	// TLS, if set, encrypts QEMU's RAM stream and authenticates the
	// destination (tls.go); nil: plain TCP.
	TLS *TLS
	// MaxBandwidth is QEMU's max-bandwidth for the RAM stream in bytes/s
	// (0: DefaultMaxBandwidth).
	MaxBandwidth uint64
	// DowntimeLimit is QEMU's downtime-limit: the longest stop QEMU's RAM
	// convergence aims at (0 or less: DefaultDowntimeLimit).
	DowntimeLimit time.Duration

	mu      sync.Mutex
	mark    uint64 // events before the migration started
	started bool
	final   *orchestrator.VMMProgress // once completed: QEMU may be gone
}

var (
	_ orchestrator.SourceVM         = (*Outgoing)(nil)
	_ orchestrator.BandwidthSetter  = (*Outgoing)(nil)
	_ orchestrator.DowntimeExpecter = (*Outgoing)(nil)
)

// Migrate starts QEMU's migration to target ("tcp:host:port").
func (o *Outgoing) Migrate(ctx context.Context, target string) error {
	vm := o.VM
	if err := vm.setTLS("client", o.TLS); err != nil {
		return err
	}
	caps := []map[string]any{
		{"capability": "pause-before-switchover", "state": true},
		{"capability": "events", "state": true},
	}
	if _, err := vm.QMP("migrate-set-capabilities", map[string]any{"capabilities": caps}); err != nil {
		return err
	}
	if _, err := vm.QMP("migrate-set-parameters", o.parameters()); err != nil {
		return err
	}
	o.mu.Lock()
	o.mark, o.started = vm.events.mark(), true
	o.mu.Unlock()
	if _, err := vm.QMP("migrate", map[string]any{"uri": target}); err != nil {
		return err
	}
	return nil
}

// parameters are QEMU's migrate-set-parameters for this migration: gmigd's
// defaults where the operator set nothing. A source QEMU that was itself
// a destination keeps no parameter of that load (measured: its
// query-migrate-parameters and capabilities equal a fresh QEMU's but for
// events), so every source is told the same.
func (o *Outgoing) parameters() map[string]any {
	limit := o.DowntimeLimit
	if limit <= 0 {
		limit = DefaultDowntimeLimit
	}
	return map[string]any{
		"max-bandwidth":  cmp.Or(o.MaxBandwidth, DefaultMaxBandwidth),
		"downtime-limit": max(limit.Milliseconds(), 1), // QEMU takes whole milliseconds, 1 the least
	}
}

// SetMaxBandwidth changes QEMU's max-bandwidth for the RAM stream while
// it migrates (orchestrator.BandwidthSetter; 0: MaxBandwidth, or
// DefaultMaxBandwidth).
func (o *Outgoing) SetMaxBandwidth(_ context.Context, bytesPerSec uint64) error {
	bw := cmp.Or(bytesPerSec, o.MaxBandwidth, DefaultMaxBandwidth)
	if _, err := o.VM.QMP("migrate-set-parameters", map[string]any{"max-bandwidth": bw}); err != nil {
		return fmt.Errorf("qemu: setting max-bandwidth %d: %w", bw, err)
	}
	return nil
}

// ExpectedDowntime is the stop QEMU's RAM convergence aims at, its
// downtime-limit (orchestrator.DowntimeExpecter).
func (o *Outgoing) ExpectedDowntime() time.Duration {
	if o.DowntimeLimit <= 0 {
		return DefaultDowntimeLimit
	}
	return max(o.DowntimeLimit, time.Millisecond)
}

// WaitPaused waits for QEMU to stop the VM before its switchover and
// returns the time of QEMU's STOP event.
func (o *Outgoing) WaitPaused(ctx context.Context) (time.Time, error) {
	e, err := o.waitStatus(ctx, "pre-switchover")
	if err != nil {
		return time.Time{}, err
	}
	stop, err := o.VM.waitEvent(ctx, o.mark, func(x Event) bool { return x.Name == "STOP" && x.Seq < e.Seq })
	if err != nil {
		return time.Time{}, fmt.Errorf("qemu: no STOP event before pre-switchover: %w", err)
	}
	return stop.At, nil
}

// Switchover lets QEMU finish its migration and waits until it completed.
func (o *Outgoing) Switchover(ctx context.Context) error {
	mark := o.VM.events.mark()
	if _, err := o.VM.QMP("migrate-continue", map[string]string{"state": "pre-switchover"}); err != nil {
		return err
	}
	o.mu.Lock()
	o.mark = mark
	o.mu.Unlock()
	if _, err := o.waitStatus(ctx, "completed"); err != nil {
		return err
	}
	if p, err := o.VM.MigrationInfo(); err == nil {
		o.mu.Lock()
		o.final = &p
		o.mu.Unlock()
	}
	return nil
}

// waitStatus waits for a MIGRATION event with status want after the mark;
// a failed or cancelled migration is an error with QEMU's reason.
func (o *Outgoing) waitStatus(ctx context.Context, want string) (Event, error) {
	o.mu.Lock()
	mark := o.mark
	o.mu.Unlock()
	e, err := o.VM.waitEvent(ctx, mark, func(x Event) bool {
		if x.Name != "MIGRATION" {
			return false
		}
		st, _ := x.Data["status"].(string)
		return st == want || st == "failed" || st == "cancelled"
	})
	if err != nil {
		return Event{}, err
	}
	if st, _ := e.Data["status"].(string); st != want {
		return Event{}, fmt.Errorf("qemu: migration %s: %s", st, o.VM.migrationError())
	}
	return e, nil
}

// Progress reports query-migrate.
func (o *Outgoing) Progress() orchestrator.VMMProgress {
	o.mu.Lock()
	started, final := o.started, o.final
	o.mu.Unlock()
	switch {
	case final != nil:
		return *final
	case !started:
		return orchestrator.VMMProgress{}
	}
	p, _ := o.VM.MigrationInfo()
	return p
}

// Resume runs the VM here again: a migration still in flight is cancelled
// (QEMU then restarts the VM itself if it had stopped it) and a VM still
// paused afterwards is continued.
func (o *Outgoing) Resume(ctx context.Context) error {
	vm := o.VM
	if p, err := vm.MigrationInfo(); err == nil {
		switch p.Status {
		case "setup", "active", "pre-switchover", "device", "wait-unplug":
			mark := vm.events.mark()
			if _, err := vm.QMP("migrate_cancel", nil); err != nil {
				return err
			}
			if _, err := vm.waitEvent(ctx, mark, func(x Event) bool {
				st, _ := x.Data["status"].(string)
				return x.Name == "MIGRATION" && (st == "cancelled" || st == "failed" || st == "completed")
			}); err != nil {
				return fmt.Errorf("qemu: waiting for the migration to end: %w", err)
			}
		}
	}
	st, err := vm.Status()
	if err != nil {
		return err
	}
	if st != "running" {
		if _, err := vm.QMP("cont", nil); err != nil {
			return fmt.Errorf("qemu: resuming the VM (it was %s): %w", st, err)
		}
	}
	return nil
}

// Release quits QEMU here: the VM runs at the destination.
func (o *Outgoing) Release(context.Context) error { return o.VM.Quit(10 * time.Second) }

// MigrationInfo is query-migrate, as the orchestrator reports it.
func (vm *VM) MigrationInfo() (orchestrator.VMMProgress, error) {
	raw, err := vm.QMP("query-migrate", nil)
	if err != nil {
		return orchestrator.VMMProgress{}, err
	}
	var q struct {
		Status   string `json:"status"`
		Downtime int64  `json:"downtime"`
		RAM      struct {
			Transferred uint64 `json:"transferred"`
			Remaining   uint64 `json:"remaining"`
			Total       uint64 `json:"total"`
		} `json:"ram"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return orchestrator.VMMProgress{}, fmt.Errorf("qemu: query-migrate: %w", err)
	}
	return orchestrator.VMMProgress{
		Status: q.Status, Transferred: q.RAM.Transferred, Remaining: q.RAM.Remaining, Total: q.RAM.Total,
		Downtime: time.Duration(q.Downtime) * time.Millisecond,
	}, nil
}

// migrationError is query-migrate's error-desc, or a placeholder.
func (vm *VM) migrationError() string {
	raw, err := vm.QMP("query-migrate", nil)
	if err != nil {
		return err.Error()
	}
	var q struct {
		ErrorDesc string `json:"error-desc"`
	}
	if json.Unmarshal(raw, &q) == nil && q.ErrorDesc != "" {
		return q.ErrorDesc
	}
	return "QEMU gave no reason"
}

// Incoming is a VM at a migration's destination (orchestrator.DestVM): a
// QEMU started with Config.Incoming, paused.
type Incoming struct {
	VM *VM
	// TLS, if set, makes QEMU accept only a TLS stream from a source
	// with a certificate from its CA (tls.go); nil: plain TCP.
	TLS *TLS
	uri string
}

var (
	_ orchestrator.DestVM        = (*Incoming)(nil)
	_ orchestrator.EarlyAttacher = (*Incoming)(nil)
)

// Listen makes QEMU listen for the incoming migration on host (an address
// of this host the source can reach) at a port it picks.
func (in *Incoming) Listen(host string) error {
	vm := in.VM
	if err := vm.setTLS("server", in.TLS); err != nil {
		return err
	}
	caps := []map[string]any{{"capability": "events", "state": true}}
	if _, err := vm.QMP("migrate-set-capabilities", map[string]any{"capabilities": caps}); err != nil {
		return err
	}
	if _, err := vm.QMP("migrate-incoming", map[string]string{"uri": "tcp:" + net.JoinHostPort(host, "0")}); err != nil {
		return err
	}
	raw, err := vm.QMP("query-migrate", nil)
	if err != nil {
		return err
	}
	var q struct {
		Sockets []struct {
			Host string `json:"host"`
			Port string `json:"port"`
		} `json:"socket-address"`
	}
	if err := json.Unmarshal(raw, &q); err != nil || len(q.Sockets) == 0 {
		return fmt.Errorf("qemu: migrate-incoming: no listening address in %s (%v)", raw, err)
	}
	if _, err := strconv.Atoi(q.Sockets[0].Port); err != nil {
		return fmt.Errorf("qemu: migrate-incoming: port %q: %w", q.Sockets[0].Port, err)
	}
	in.uri = "tcp:" + net.JoinHostPort(host, q.Sockets[0].Port)
	// Before the downtime: what the front end's restore can learn now.
	if err := vm.PrepareFrontEnd(); err != nil {
		vm.cfg.Log.Info().Err(err).Msg("the vGPU's front-end restore is not fully prepared: it will do the rest in the downtime")
	}
	return nil
}

// PID is the destination QEMU's process (recorded while the migration is
// pending, so a restarted gmigd can end it).
func (in *Incoming) PID() int { return in.VM.PID() }

// Incoming is where the source QEMU migrates to.
func (in *Incoming) Incoming() string { return in.uri }

// WaitLoaded waits until QEMU has loaded the incoming migration.
func (in *Incoming) WaitLoaded(ctx context.Context) error {
	vm := in.VM
	for {
		mark := vm.events.mark()
		p, err := vm.MigrationInfo()
		if err != nil {
			return err
		}
		switch p.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("qemu: incoming migration %s: %s", p.Status, vm.migrationError())
		}
		if _, err := vm.waitEvent(ctx, mark, func(x Event) bool { return x.Name == "MIGRATION" }); err != nil {
			return fmt.Errorf("qemu: waiting for the incoming migration: %w", err)
		}
	}
}

// RestoreFrontEnd replays the guest's config writes into QEMU's front end
// of the vGPU and re-routes its interrupt (frontend.go).
func (in *Incoming) RestoreFrontEnd(_ context.Context, writes []apilog.Entry) error {
	return in.VM.RestoreFrontEnd(writes)
}

// Resume continues the VM and returns the time of QEMU's RESUME event.
func (in *Incoming) Resume(ctx context.Context) (time.Time, error) {
	vm := in.VM
	mark := vm.events.mark()
	if _, err := vm.QMP("cont", nil); err != nil {
		return time.Time{}, err
	}
	e, err := vm.waitEvent(ctx, mark, func(x Event) bool { return x.Name == "RESUME" })
	if err != nil {
		if errors.Is(err, ErrGone) {
			return time.Time{}, err
		}
		return time.Time{}, fmt.Errorf("qemu: no RESUME event after cont: %w", err)
	}
	return e.At, nil
}

// AttachBeforeCommit is true: the destination QEMU's load and its front
// end's restore run before the source's commit, since an abort kills this
// QEMU with everything they did (orchestrator.EarlyAttacher).
func (in *Incoming) AttachBeforeCommit() bool { return true }
