package orchestrator

import (
	"context"
	"time"

	"github.com/gmig-dev/gmig/internal/apilog"
)

// SourceVM is the VM on the source host as the orchestrator drives it: QEMU
// over QMP (hostd/qemu) or the in-process simulator (internal/sim). Calls
// come from one goroutine, in the order of the sequence (doc.go).
type SourceVM interface {
	// Migrate starts the VMM's own migration of the VM (RAM and its own
	// devices) to the destination VMM at target (DestVM.Incoming). It is
	// called once the vGPU's live phase has ended: from here on the VMM may
	// pause the VM whenever it chooses (QEMU: when its RAM pre-copy
	// converges), and it must then hold the VM paused before its switchover
	// (QEMU: capability pause-before-switchover).
	Migrate(ctx context.Context, target string) error
	// WaitPaused returns once the VM is paused before the switchover, with
	// the host time at which the guest stopped running.
	WaitPaused(ctx context.Context) (time.Time, error)
	// Switchover lets the VMM finish its migration (QEMU:
	// migrate-continue) and returns once it has completed. The VM stays
	// paused here.
	Switchover(ctx context.Context) error
	// Progress reports the VMM's own migration (zero before Migrate).
	Progress() VMMProgress
	// Resume runs the VM here again after a failed migration: it cancels
	// the VMM's migration if one is in flight and resumes the VM if it is
	// paused. It must be safe to call at any point of the sequence.
	Resume(ctx context.Context) error
	// Release ends the VM here once the destination runs it (QEMU: quit).
	Release(ctx context.Context) error
}

// DestVM is the VM on the destination host, created paused for an
// incoming migration by the destination's Host.
type DestVM interface {
	// Incoming is the address the source VMM migrates to ("" when the
	// VMM has no migration of its own, as the simulator's shared RAM).
	// With a VMM migration, the guest RAM the source's device wrote
	// during the migration is written into the VM's RAM after WaitLoaded
	// through the destination vGPU's DMA mappings: the VMM must have
	// mapped guest RAM for the device by then (QEMU does at start-up).
	Incoming() string
	// WaitLoaded returns once the VMM has loaded the incoming VM; it stays
	// paused.
	WaitLoaded(ctx context.Context) error
	// RestoreFrontEnd gives the vGPU's PCI front end in the VMM back the
	// guest's config writes (BARs, command register, interrupt line and
	// routing, MSI), which the VMM's vfio-user client does not migrate.
	RestoreFrontEnd(ctx context.Context, writes []apilog.Entry) error
	// Resume runs the VM and returns the host time at which it resumed.
	Resume(ctx context.Context) (time.Time, error)
}

// VMMProgress is the VMM's own migration as its monitor reports it.
type VMMProgress struct {
	Status      string `json:"status,omitempty"` // e.g. "active", "pre-switchover", "completed"
	Transferred uint64 `json:"transferred"`      // RAM bytes sent
	Remaining   uint64 `json:"remaining"`        // RAM bytes still to send
	Total       uint64 `json:"total"`            // guest RAM bytes
	// Downtime is the VMM's own downtime figure once it has completed
	// (QEMU's query-migrate "downtime": its stop to its completion, on the
	// source only; it does not see the destination's resume).
	Downtime time.Duration `json:"downtime,omitempty"`
}
