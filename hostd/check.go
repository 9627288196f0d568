package hostd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// A migration's dry run (gmigd migrate --dry-run): the source asks the
// destination what Land would need, without landing anything.

var _ orchestrator.Checker = (*Host)(nil)

// Check implements orchestrator.Checker: whether Land would take p here —
// the name free, room in the pool for the vGPU, its back end, and for a
// QEMU VM this host's QEMU and the VM's machine type. It reserves nothing.
func (h *Host) Check(ctx context.Context, p orchestrator.Prepare) []orchestrator.CheckItem {
	item := func(what string, err error, ok string) orchestrator.CheckItem {
		if err != nil {
			return orchestrator.CheckItem{What: what, Detail: err.Error()}
		}
		return orchestrator.CheckItem{What: what, OK: true, Detail: ok}
	}
	cfg, err := p.VGPU.Config(p.Name)
	items := []orchestrator.CheckItem{item("vgpu", err, fmt.Sprintf("%s, %d MiB, back end %s", p.Name, p.VGPU.MemSize>>20, p.VGPU.Backend))}
	if err != nil {
		return items
	}
	items = append(items, item("name", h.nameFree(p.Name), p.Name+" is free here"))
	free := h.largestFree()
	var room error
	if free < cfg.MemSize {
		room = fmt.Errorf("hostd: the pool's largest free range is %d MiB; the vGPU needs %d MiB", free>>20, cfg.MemSize>>20)
	}
	items = append(items, item("pool", room, fmt.Sprintf("%d MiB free in one range, %d MiB needed", free>>20, cfg.MemSize>>20)))
	var backend error
	if cfg.Backend == vgpu.BackendCUDA {
		_, backend = nvidia.OpenGPU(vgpu.GPUOrdinal)
	}
	items = append(items, item("back end", backend, cfg.Backend+" available"))
	switch p.VMKind {
	case KindQEMU:
		items = append(items, h.checkQEMU(ctx, p.VM)...)
	case KindSim:
		var name string
		err := json.Unmarshal(p.VM, &name)
		switch {
		case err != nil:
		case h.cfg.Sims == nil:
			err = fmt.Errorf("hostd: this gmigd takes no simulated VMs")
		default:
			if _, ok := h.cfg.Sims.Get(name); !ok {
				err = fmt.Errorf("hostd: no simulated VM %q in this process", name)
			}
		}
		items = append(items, item("vm", err, "simulated VM "+name))
	default:
		items = append(items, item("vm", fmt.Errorf("hostd: VM kind %q: want %s or %s", p.VMKind, KindQEMU, KindSim), ""))
	}
	return items
}

// nameFree says why name cannot land here, if it cannot.
func (h *Host) nameFree(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.vms[name]; ok {
		return fmt.Errorf("%w: %s", ErrVMExists, name)
	}
	if _, ok := h.vgpus[name]; ok {
		return fmt.Errorf("%w: %s", ErrExists, name)
	}
	return nil
}

// largestFree is the pool's largest free range in bytes (the pool
// allocates a vGPU one range).
func (h *Host) largestFree() uint64 {
	var start, best uint64
	for _, pt := range h.pool.Partitions() { // by offset
		best = max(best, pt.Offset-start)
		start = pt.End()
	}
	return max(best, h.pool.Size()-start)
}

// checkQEMU checks this host's QEMU and the machine type spec names.
func (h *Host) checkQEMU(ctx context.Context, raw json.RawMessage) []orchestrator.CheckItem {
	var spec qemu.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return []orchestrator.CheckItem{{What: "vm", Detail: fmt.Sprintf("hostd: the source's QEMU spec: %v", err)}}
	}
	root := h.cfg.QEMURoot
	if err := root.Check(); err != nil {
		return []orchestrator.CheckItem{{What: "qemu", Detail: err.Error()}}
	}
	version, err := root.Version(ctx)
	if err != nil {
		return []orchestrator.CheckItem{{What: "qemu", Detail: err.Error()}}
	}
	items := []orchestrator.CheckItem{{What: "qemu", OK: true, Detail: version}}
	spec, err = spec.Resolve()
	if err == nil {
		err = machineAvailable(ctx, root, spec.Machine)
	}
	if err != nil {
		return append(items, orchestrator.CheckItem{What: "machine", Detail: err.Error()})
	}
	return append(items, orchestrator.CheckItem{What: "machine", OK: true, Detail: spec.Machine})
}

// machineAvailable checks that root's QEMU lists machine type m
// (`-machine help`: one type a line, its name first).
func machineAvailable(ctx context.Context, root qemu.Root, m string) error {
	out, err := root.Command(ctx, "-machine", "help").Output()
	if err != nil {
		return fmt.Errorf("hostd: qemu -machine help: %w", err)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == m {
			return nil
		}
	}
	return fmt.Errorf("hostd: this host's QEMU has no machine type %q", m)
}

// CheckMigration is a dry run of MigrateVM(ctx, name, peer, opts): the
// destination checks what it would need (orchestrator.Check) and the
// answer carries an estimate of the stop phase; nothing moves and the VM
// is left as it is. A destination that would refuse gives
// orchestrator.ErrCheckFailed with the report.
func (h *Host) CheckMigration(ctx context.Context, name, peer string, opts MigrateOptions) (orchestrator.CheckReport, error) {
	h.mu.Lock()
	r, ok := h.vms[name]
	var s *served
	if ok {
		s = h.vgpus[r.vgpu]
	}
	h.mu.Unlock()
	switch {
	case !ok:
		return orchestrator.CheckReport{}, fmt.Errorf("%w: %s", ErrNoVM, name)
	case s == nil:
		return orchestrator.CheckReport{}, fmt.Errorf("%w: %s (the vGPU of VM %s)", ErrNotFound, r.vgpu, name)
	}
	vm, kind, spec, err := r.sourceVM(opts)
	if err != nil {
		return orchestrator.CheckReport{}, err
	}
	return orchestrator.Check(ctx, orchestrator.Source{
		VGPU: s.v, VM: vm, Peer: peer, Transport: h.cfg.Transport,
		VMKind: kind, VMSpec: spec, Name: r.vgpu, Precopy: opts.Precopy, Timeouts: h.cfg.Timeouts,
		Log: h.log.With().Str("vm", name).Logger(),
	})
}
