package hostd

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/hostd/qemu"
)

// States of the VMs a restarted gmigd finds its last run left (recoverVMs).
const (
	// vmVGPULost: the VM's QEMU outlived the gmigd that started it; the
	// vGPU's device model and memory died with that gmigd, so the guest
	// runs without a working vGPU. It cannot migrate; `gmigd vm stop`
	// ends it.
	vmVGPULost = "vgpu-lost"
	// vmLost: the VM's QEMU ended with the gmigd that started it. QEMU
	// 11.1.3's vfio-user client aborts when its server goes away while
	// the guest uses the device ("util/error.c:62: error_setv: Assertion
	// `*errp == NULL' failed."; migration-protocol.md §5): the VM is
	// gone. `gmigd vm stop` forgets it.
	vmLost = "lost"
)

// recoverVMs reports the VMs an earlier gmigd of this run directory
// started and did not stop: each left its mark, RUN-DIR/vms/NAME/vm
// (vmMark), and its QMP socket there, RUN-DIR/vms/NAME/qmp.sock, unless
// its QEMU removed that when it exited (QEMU unlinks its listening
// sockets on a clean exit: one that ends on SIGTERM, as a QEMU does when
// the gmigd that started it dies). A QEMU still behind it is adopted and
// listed in state vgpu-lost, an outgoing migration it was left in ended
// first (qemu.VM.EndOrphanedMigration: cancelled and the VM continued if
// it had not completed; left paused if it had). A socket with no QEMU
// behind it is a VM that died with that gmigd: listed in state lost until
// it is stopped. The QEMUs of incoming migrations left pending are ended
// before (recoverMigrations) and are not reported.
func (h *Host) recoverVMs() {
	for _, sock := range leftVMs(h.cfg.RunDir) {
		name := filepath.Base(filepath.Dir(sock))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		q, err := qemu.Adopt(ctx, sock, qemu.DeviceID)
		if err != nil {
			cancel()
			if _, ierr := os.Stat(incomingMark(filepath.Dir(sock))); ierr == nil {
				// An incoming migration's QEMU: it never ran the VM.
				h.forgetVMFiles(filepath.Dir(sock))
				continue
			}
			h.log.Warn().Err(err).Str("vm", name).Str("console", filepath.Join(filepath.Dir(sock), "console.log")).
				Msg("a VM's QEMU ended with the last gmigd: listed as " + vmLost + " (gmigd vm stop forgets it)")
			h.vms[name] = &vmRec{name: name, kind: KindQEMU, vgpu: name, state: vmLost, qmpPath: sock}
			continue
		}
		state, mig, err := q.EndOrphanedMigration(ctx)
		cancel()
		log := h.log.Warn()
		if err != nil {
			log = h.log.Error().Err(err)
		}
		log.Str("vm", name).Int("pid", q.PID()).Str("qemu_state", state).Str("migration", mig).
			Msg("a VM's QEMU outlived the last gmigd; its vGPU was lost with it: listed as " + vmVGPULost + " (gmigd vm stop ends it)")
		h.vms[name] = &vmRec{name: name, kind: KindQEMU, vgpu: name, state: vmVGPULost, q: q, qmpPath: sock}
	}
}

// recoverVGPUs reports the vGPUs the last gmigd of this run directory
// served when it ended without destroying them (killed, or crashed): their
// device models and memory died with it. Each left its socket,
// RUN_DIR/vgpu/NAME.sock, which is removed once a connect to it is
// refused; one a server still answers on is left alone.
func (h *Host) recoverVGPUs() {
	socks, _ := filepath.Glob(h.vgpuSocket("*"))
	for _, sock := range socks {
		name := strings.TrimSuffix(filepath.Base(sock), ".sock")
		removed, err := removeStaleSocket(sock)
		switch {
		case err != nil:
			h.log.Error().Err(err).Str("vgpu", name).Str("socket", sock).Msg("a vGPU socket of the last gmigd left in place")
		case removed:
			h.log.Warn().Str("vgpu", name).Str("socket", sock).
				Msg("a vGPU was lost with the last gmigd (its device model and memory ended with it): stale socket removed")
		}
	}
}

// leftVMs returns the QMP socket path of every VM directory of runDir that
// still says a VM runs: its socket, or its mark (the socket may be gone),
// in name order.
func leftVMs(runDir string) []string {
	var socks []string
	seen := map[string]bool{}
	for _, pattern := range []string{"qmp.sock", "vm"} {
		found, _ := filepath.Glob(filepath.Join(runDir, "vms", "*", pattern))
		for _, f := range found {
			if dir := filepath.Dir(f); !seen[dir] {
				seen[dir] = true
				socks = append(socks, filepath.Join(dir, "qmp.sock"))
			}
		}
	}
	slices.Sort(socks)
	return socks
}

// vmMark is the file gmigd puts in a VM's directory before it starts the
// VM's QEMU and removes once it has ended the VM itself (forgetVMFiles):
// what tells a restarted gmigd that a VM ran here, whatever QEMU left.
func vmMark(dir string) string { return filepath.Join(dir, "vm") }

// incomingMark is the file that marks a VM directory as an incoming
// migration's until its commit: its QEMU never ran the VM, and a restart
// that finds it gone does not report it lost.
func incomingMark(dir string) string { return filepath.Join(dir, "incoming") }

// forgetVMFiles removes what says a VM runs from its directory once gmigd
// has ended the VM itself (its mark, its QMP socket: a QEMU killed leaves
// it; the incoming mark) and its readline HMP monitor's socket. The
// console log stays.
func (h *Host) forgetVMFiles(dir string) {
	for _, f := range []string{vmMark(dir), filepath.Join(dir, "qmp.sock"), filepath.Join(dir, qemu.HMPSocket), incomingMark(dir)} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			h.log.Warn().Err(err).Msg("removing a VM's file")
		}
	}
}

// waitGone waits up to timeout for our QEMU pid to end (a zombie has no
// command line: it counts as gone).
func (h *Host) waitGone(pid int, timeout time.Duration) {
	for end := time.Now().Add(timeout); isOurQEMU(pid, h.cfg.RunDir) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
}
