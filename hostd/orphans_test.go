package hostd

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/vgpu"
)

// TestRecoverVMs: a restarted gmigd lists a VM whose QEMU is gone — its
// QMP socket left, nothing behind it (a QEMU killed), or only gmigd's
// mark left (a QEMU that exited cleanly unlinks its socket) — as lost
// until it is stopped, and forgets an incoming migration's VM directory
// without reporting it.
func TestRecoverVMs(t *testing.T) {
	dir := t.TempDir()
	stale := func(name string) string {
		d := filepath.Join(dir, "vms", name)
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(d, "qmp.sock")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close() // what a killed QEMU leaves
		if err := os.WriteFile(vmMark(d), nil, 0o640); err != nil {
			t.Fatal(err)
		}
		return d
	}
	stale("gone")
	exited := filepath.Join(dir, "vms", "exited")
	if err := os.MkdirAll(exited, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vmMark(exited), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	stopped := filepath.Join(dir, "vms", "stopped") // a VM stopped by gmigd: its console alone
	if err := os.MkdirAll(stopped, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stopped, "console.log"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	in := stale("arriving")
	if err := os.WriteFile(incomingMark(in), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{PoolSize: 16 << 20, RunDir: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	vms := h.ListVMs()
	if len(vms) != 2 || vms[0].Name != "exited" || vms[1].Name != "gone" || vms[0].State != vmLost || vms[1].State != vmLost {
		t.Fatalf("recovered %+v, want exited and gone %s", vms, vmLost)
	}
	if err := h.StopVM("exited"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vmMark(exited)); !os.IsNotExist(err) {
		t.Errorf("the exited VM's mark after the stop: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(in, "qmp.sock")); !os.IsNotExist(err) {
		t.Errorf("the incoming VM's socket: %v, want removed", err)
	}
	if _, err := h.MigrateVM(t.Context(), "gone", "127.0.0.1:1", MigrateOptions{}); err == nil {
		t.Error("a lost VM migrates")
	}
	if err := h.StopVM("gone"); err != nil {
		t.Fatal(err)
	}
	if vms := h.ListVMs(); len(vms) != 0 {
		t.Errorf("after the stop: %+v", vms)
	}
	if _, err := os.Stat(filepath.Join(dir, "vms", "gone", "qmp.sock")); !os.IsNotExist(err) {
		t.Errorf("the lost VM's socket after the stop: %v", err)
	}
}

// TestRestartReportsLostVGPUs: a gmigd restarted after one that died with
// a vGPU logs that vGPU as lost and removes its stale socket; the name can
// be used again.
func TestRestartReportsLostVGPUs(t *testing.T) {
	dir := t.TempDir()
	h, err := New(Config{PoolSize: 16 << 20, RunDir: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	info, err := h.Create(vgpu.Config{Name: "g0", MemSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	// What a killed gmigd leaves: the vGPU's socket with no server.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: info.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	var log lockedBuffer
	h, err = New(Config{PoolSize: 16 << 20, RunDir: dir, Log: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lost := log.messages("a vGPU was lost with the last gmigd (its device model and memory ended with it): stale socket removed")
	if len(lost) != 1 || lost[0]["vgpu"] != "g0" {
		t.Fatalf("logged %v, want vGPU g0 lost", lost)
	}
	if _, err := os.Lstat(info.Socket); !os.IsNotExist(err) {
		t.Fatalf("the stale socket: %v, want removed", err)
	}
	if _, err := h.Create(vgpu.Config{Name: "g0", MemSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
}
