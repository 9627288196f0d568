package hostd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// items indexes a check's items by what they checked.
func items(list []orchestrator.CheckItem) map[string]orchestrator.CheckItem {
	m := map[string]orchestrator.CheckItem{}
	for _, it := range list {
		m[it.What] = it
	}
	return m
}

// specOf is the spec of a vGPU of mem bytes as a source would send it.
func specOf(t *testing.T, mem uint64) vgpu.Spec {
	t.Helper()
	h := newHostWith(t, Config{PoolSize: mem})
	if _, err := h.Create(vgpu.Config{Name: "src", MemSize: mem}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vgpus["src"].v.Spec()
}

// TestCheckQEMU: a dry run's destination names its QEMU's version and
// finds a machine type its QEMU has, and not one it lacks. It needs the
// provisioned QEMU root (GMIG_CACHE).
func TestCheckQEMU(t *testing.T) {
	cache := os.Getenv("GMIG_CACHE")
	if cache == "" {
		t.Skip("GMIG_CACHE is not set: no QEMU root")
	}
	h := newHostWith(t, Config{QEMURoot: qemu.Root(filepath.Join(cache, "qemu-root"))})
	for _, c := range []struct {
		machine string
		ok      bool
	}{{"q35", true}, {"pc-i440fx-1.0", false}} {
		spec, _ := json.Marshal(qemu.Spec{Machine: c.machine})
		got := items(h.Check(t.Context(), orchestrator.Prepare{Name: "vm1", VGPU: specOf(t, 1<<20),
			VMKind: KindQEMU, VM: spec}))
		if q := got["qemu"]; !q.OK || !strings.Contains(q.Detail, "QEMU emulator version") {
			t.Errorf("qemu: %+v", q)
		}
		if m := got["machine"]; m.OK != c.ok {
			t.Errorf("machine %s: %+v, want ok %v", c.machine, m, c.ok)
		}
	}
}

// TestCheckRefusals: a name in use, a vGPU larger than the pool's largest
// free range and an unknown VM kind each fail their item; nothing is
// created.
func TestCheckRefusals(t *testing.T) {
	h := newHostWith(t, Config{PoolSize: 8 << 20})
	for _, name := range []string{"a", "b"} {
		if _, err := h.Create(vgpu.Config{Name: name, MemSize: 2 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Destroy("a"); err != nil { // 2 MiB free at 0, 4 MiB at the end
		t.Fatal(err)
	}
	got := items(h.Check(t.Context(), orchestrator.Prepare{Name: "b", VGPU: specOf(t, 8<<20), VMKind: "xen"}))
	for _, what := range []string{"name", "pool", "vm"} {
		if got[what].OK {
			t.Errorf("%s passed: %+v", what, got[what])
		}
	}
	if !got["vgpu"].OK || !got["back end"].OK || !strings.Contains(got["pool"].Detail, "largest free range is 4 MiB") {
		t.Errorf("%+v", got)
	}
	if n := len(h.List()); n != 1 {
		t.Errorf("%d vGPUs after the check, want 1", n)
	}
}
