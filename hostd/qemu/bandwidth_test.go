package qemu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSetMaxBandwidth: the orchestrator's share of a migration's
// bandwidth reaches QEMU's max-bandwidth, and 0 gives back gmigd's
// default. It needs the provisioned QEMU root (GMIG_CACHE).
func TestSetMaxBandwidth(t *testing.T) {
	root := needRoot(t)
	run := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	vm, err := Start(t.Context(), Config{Spec: Spec{Accel: "tcg", MemoryMB: 64}, Root: root, RunDir: run, Serial: out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(vm.Kill)
	o := &Outgoing{VM: vm}
	for _, c := range []struct{ set, want uint64 }{{20e6, 20e6}, {0, DefaultMaxBandwidth}} {
		if err := o.SetMaxBandwidth(t.Context(), c.set); err != nil {
			t.Fatal(err)
		}
		raw, err := vm.QMP("query-migrate-parameters", nil)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			MaxBandwidth uint64 `json:"max-bandwidth"`
		}
		if err := json.Unmarshal(raw, &p); err != nil || p.MaxBandwidth != c.want {
			t.Errorf("set %d: QEMU's max-bandwidth %d (%v), want %d", c.set, p.MaxBandwidth, err, c.want)
		}
	}
}
