package hostd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// VM kinds: how a VM's VMM is driven.
const (
	KindQEMU = "qemu" // QEMU over QMP: started by gmigd or adopted
	KindSim  = "sim"  // the in-process simulator (demo, bench, tests)
)

// VM states.
const (
	vmRunning        = "running"
	vmMigrating      = "migrating"
	vmOutcomeUnknown = "outcome-unknown" // a commit went unanswered: paused here until the destination answers
	// vmExited: the VM's QEMU ended on its own (the guest powered off,
	// or QEMU failed); `gmigd vm stop` forgets it and destroys its vGPU.
	// A listing derives it from the process, never stores it.
	vmExited = "exited"
)

// ErrVMExists and ErrNoVM are the VM table's errors.
var (
	ErrVMExists = errors.New("hostd: VM already exists")
	ErrNoVM     = errors.New("hostd: no such VM")
	ErrVMState  = errors.New("hostd: the VM's state does not allow it")
)

// VMInfo describes one VM for listings.
type VMInfo struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	State   string `json:"state"`
	VGPU    string `json:"vgpu"`
	Adopted bool   `json:"adopted,omitempty"`
	PID     int    `json:"pid,omitempty"`
	QMP     string `json:"qmp,omitempty"`
	Console string `json:"console,omitempty"`
	Machine string `json:"machine,omitempty"`
	Accel   string `json:"accel,omitempty"` // kvm or tcg; "" for an adopted VM
}

// vmRec is one VM this host runs.
type vmRec struct {
	name, kind, vgpu string
	state            string
	ownsVGPU         bool // the vGPU was made for the VM (destroyed with it)

	q       *qemu.VM // KindQEMU
	adopted bool
	qmpPath string
	console *os.File

	sim  *sim.VM         // KindSim
	held <-chan struct{} // KindSim: a HoldAt the migration's pause waits for
}

func (r *vmRec) info() VMInfo {
	i := VMInfo{Name: r.name, Kind: r.kind, State: r.stateNow(), VGPU: r.vgpu, Adopted: r.adopted, QMP: r.qmpPath}
	if r.q != nil {
		i.PID = r.q.PID()
		c := r.q.Config()
		i.Machine, i.Accel = c.Machine, c.Accel
		if len(c.Argv) > 0 {
			i.Machine = "(adopted command line)"
		}
	}
	if r.console != nil {
		i.Console = r.console.Name()
	}
	return i
}

// stateNow is the VM's state: its recorded one, or exited when its QEMU
// has ended since it last ran here.
func (r *vmRec) stateNow() string {
	if r.state == vmRunning && r.q != nil {
		select {
		case <-r.q.Done():
			return vmExited
		default:
		}
	}
	return r.state
}

// watchExit logs, once, the end of r's QEMU if it ends on its own while r
// is this host's running VM (the guest powered off, or QEMU failed); a VM
// stopped, migrated away or shut down with gmigd has left the table or
// its running state first, and one that ends in the middle of a migration
// is reported by the migration.
func (h *Host) watchExit(r *vmRec) {
	if r.q == nil {
		return
	}
	go func() {
		<-r.q.Done()
		h.mu.Lock()
		own := h.vms[r.name] == r && r.state == vmRunning
		h.mu.Unlock()
		if own {
			err := r.q.Wait(context.Background())
			h.log.Warn().Str("vm", r.name).Int("pid", r.q.PID()).AnErr("exit", err).Strs("qemu_stderr", r.q.LastOutput()).
				Msg("the VM's QEMU ended on its own: listed as " + vmExited + " (gmigd vm stop forgets it)")
		}
	}()
}

// close ends the VM's VMM when gmigd owns it (a QEMU it started).
func (r *vmRec) close() {
	if r.q != nil && !r.adopted {
		if err := r.q.Quit(5 * time.Second); err != nil {
			r.q.Kill()
		}
	}
	if r.console != nil {
		r.console.Close()
	}
}

// StartVMRequest starts a QEMU VM with a new vGPU of its name.
type StartVMRequest struct {
	Name       string `json:"name"`
	MemSize    uint64 `json:"vgpu_mem_size,omitempty"` // the vGPU's graphics memory (default 64 MiB)
	GTTEntries uint32 `json:"vgpu_gtt_entries,omitempty"`
	// The vGPU's back end, guest modules and device-local memory, as
	// CreateRequest's.
	Backend      string    `json:"vgpu_backend,omitempty"`
	GuestModules bool      `json:"vgpu_guest_modules,omitempty"`
	LocalMemSize uint64    `json:"vgpu_local_mem_size,omitempty"`
	GPUIsolation string    `json:"vgpu_gpu_isolation,omitempty"`
	QEMU         qemu.Spec `json:"qemu"`
}

// StartVM creates the VM's vGPU (named after it) and starts QEMU with it:
// guest RAM as a shared memfd, a QMP socket and the serial console in
// RunDir/vms/NAME. An unsafe configuration (guest RAM not a shared memfd, a
// machine type other than pc or q35) is refused before anything starts.
func (h *Host) StartVM(ctx context.Context, req StartVMRequest) (VMInfo, error) {
	spec, err := req.QEMU.Resolve()
	if err != nil {
		return VMInfo{}, err
	}
	h.lockName(req.Name)
	if _, ok := h.vms[req.Name]; ok {
		h.mu.Unlock()
		return VMInfo{}, fmt.Errorf("%w: %s", ErrVMExists, req.Name)
	}
	s, err := h.createLocked(vgpu.Config{Name: req.Name, MemSize: req.MemSize, GTTEntries: req.GTTEntries,
		Backend: req.Backend, GuestModules: req.GuestModules, LocalMemSize: req.LocalMemSize, GPUIsolation: req.GPUIsolation}, stateLive)
	if err == nil {
		h.vms[req.Name] = &vmRec{name: req.Name, kind: KindQEMU, vgpu: req.Name, state: "starting", ownsVGPU: true}
	}
	h.mu.Unlock()
	if err != nil {
		return VMInfo{}, err
	}
	r, err := h.launch(ctx, req.Name, spec, s.socket, false)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		delete(h.vms, req.Name)
		h.destroyLocked(req.Name)
		return VMInfo{}, err
	}
	r.state = vmRunning
	h.vms[req.Name] = r
	h.watchExit(r)
	h.log.Info().Str("vm", req.Name).Int("pid", r.q.PID()).Str("machine", spec.Machine).Msg("VM started")
	return r.info(), nil
}

// launch starts QEMU for VM name with its vGPU at socket (incoming: paused,
// waiting for a migration).
func (h *Host) launch(ctx context.Context, name string, spec qemu.Spec, socket string, incoming bool) (*vmRec, error) {
	dir := filepath.Join(h.cfg.RunDir, "vms", name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("hostd: VM directory: %w", err)
	}
	if err := os.WriteFile(vmMark(dir), nil, 0o640); err != nil {
		return nil, fmt.Errorf("hostd: VM directory: %w", err)
	}
	con, err := openConsole(dir, name, incoming)
	if err != nil {
		return nil, err
	}
	scope := ""
	if qemu.UseScopes() {
		scope = qemu.ScopeUnit(name)
	}
	q, err := qemu.Start(ctx, qemu.Config{
		Spec: spec, Root: h.cfg.QEMURoot, VfioUser: socket, RunDir: dir, Serial: con, Incoming: incoming, Scope: scope,
		Log: h.log.With().Str("vm", name).Logger(),
	})
	if err != nil {
		con.Close()
		// QEMU makes its QMP socket before it can fail: a socket left
		// would make a restarted gmigd report a VM that never ran.
		h.forgetVMFiles(dir)
		return nil, err
	}
	return &vmRec{
		name: name, kind: KindQEMU, vgpu: name, ownsVGPU: true, q: q,
		qmpPath: filepath.Join(dir, "qmp.sock"), console: con,
	}, nil
}

// openConsole opens VM name's console log in dir for a QEMU about to
// start, appending: a VM that comes back to a host it left (a migration
// there and back, a failed landing before) keeps what its earlier QEMUs
// here wrote. Each QEMU's part begins with a marker line saying when and
// how it started.
func openConsole(dir, name string, incoming bool) (*os.File, error) {
	con, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("hostd: VM console: %w", err)
	}
	how := "started"
	if incoming {
		how = "waiting for an incoming migration"
	}
	if _, err := fmt.Fprintf(con, "%s VM %s: QEMU %s at %s\n", ConsoleMarker, name, how, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		con.Close()
		return nil, fmt.Errorf("hostd: VM console: %w", err)
	}
	return con, nil
}

// ConsoleMarker begins the line gmigd writes into a VM's console log
// before each QEMU it starts for the VM.
const ConsoleMarker = "--- gmigd:"

// AdoptVM takes a QEMU started by someone else (libvirt) under gmigd, by
// its QMP socket: vgpuName is the vGPU on this host it uses, as the
// vfio-user-pci device with id qemu.DeviceID. The VM must run with guest
// RAM as a shared memfd on a pc or q35 machine.
func (h *Host) AdoptVM(ctx context.Context, name, qmpPath, vgpuName string) (VMInfo, error) {
	if err := CheckName(name); err != nil {
		return VMInfo{}, err
	}
	h.mu.Lock()
	_, exists := h.vms[name]
	_, hasVGPU := h.vgpus[vgpuName]
	h.mu.Unlock()
	switch {
	case exists:
		return VMInfo{}, fmt.Errorf("%w: %s", ErrVMExists, name)
	case !hasVGPU:
		return VMInfo{}, fmt.Errorf("%w: %s", ErrNotFound, vgpuName)
	}
	q, err := qemu.Adopt(ctx, qmpPath, qemu.DeviceID)
	if err != nil {
		return VMInfo{}, err
	}
	r := &vmRec{name: name, kind: KindQEMU, vgpu: vgpuName, state: vmRunning, q: q, adopted: true, qmpPath: qmpPath}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.vms[name]; ok {
		return VMInfo{}, fmt.Errorf("%w: %s", ErrVMExists, name)
	}
	h.vms[name] = r
	h.watchExit(r)
	h.log.Info().Str("vm", name).Int("pid", q.PID()).Str("qmp", qmpPath).Str("vgpu", vgpuName).Msg("VM adopted")
	return r.info(), nil
}

// AddSimVM registers an in-process simulated VM using vGPU vgpuName, so it
// can be migrated like any other. held, if set, is a sim.VM.HoldAt channel:
// a migration pauses the VM only once the workload waits there.
func (h *Host) AddSimVM(name, vgpuName string, vm *sim.VM, held <-chan struct{}) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.vms[name]; ok {
		return fmt.Errorf("%w: %s", ErrVMExists, name)
	}
	if _, ok := h.vgpus[vgpuName]; !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, vgpuName)
	}
	h.vms[name] = &vmRec{name: name, kind: KindSim, vgpu: vgpuName, state: vmRunning, sim: vm, held: held}
	return nil
}

// ListVMs describes every VM, by name.
func (h *Host) ListVMs() []VMInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]VMInfo, 0, len(h.vms))
	for _, r := range h.vms {
		out = append(out, r.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// GetVM describes one VM.
func (h *Host) GetVM(name string) (VMInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.vms[name]
	if !ok {
		return VMInfo{}, fmt.Errorf("%w: %s", ErrNoVM, name)
	}
	return r.info(), nil
}

// StopVM stops a VM gmigd started (QEMU quits) and destroys its vGPU; an
// adopted VM is only released from gmigd's care (its owner stops it).
func (h *Host) StopVM(name string) error {
	h.mu.Lock()
	r, ok := h.vms[name]
	switch {
	case !ok:
		h.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNoVM, name)
	case r.state == vmMigrating || r.state == vmOutcomeUnknown:
		h.mu.Unlock()
		return fmt.Errorf("%w: %s is %s", ErrVMState, name, r.state)
	}
	delete(h.vms, name)
	s := h.vgpus[r.vgpu] // the VM's own, destroyed with it
	h.mu.Unlock()
	r.close()
	if r.kind == KindQEMU && !r.adopted && r.qmpPath != "" {
		h.forgetVMFiles(filepath.Dir(r.qmpPath))
	}
	if r.ownsVGPU && s != nil {
		if err := h.destroyServed(r.vgpu, s); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	h.log.Info().Str("vm", name).Bool("adopted", r.adopted).Msg("VM stopped")
	return nil
}

// destroyLocked removes a vGPU with the host lock held (its shutdown waits
// for its server only, which never takes the host lock).
func (h *Host) destroyLocked(name string) {
	s, ok := h.vgpus[name]
	if !ok {
		return
	}
	delete(h.vgpus, name)
	if err := h.shutdown(s); err != nil {
		h.log.Warn().Err(err).Str("vgpu", name).Msg("destroying vGPU")
	}
}

// sourceVM is the orchestrator's view of r at a migration's source.
func (r *vmRec) sourceVM(opts MigrateOptions) (orchestrator.SourceVM, string, json.RawMessage, error) {
	switch r.kind {
	case KindQEMU:
		spec, err := json.Marshal(r.q.Config().Spec)
		if err != nil {
			return nil, "", nil, err
		}
		return &qemu.Outgoing{VM: r.q, MaxBandwidth: opts.MaxBandwidth, DowntimeLimit: opts.DowntimeLimit}, KindQEMU, spec, nil
	case KindSim:
		spec, _ := json.Marshal(r.name)
		return &simSource{VM: r.sim, Held: r.held}, KindSim, spec, nil
	}
	return nil, "", nil, fmt.Errorf("hostd: VM kind %q cannot migrate", r.kind)
}
