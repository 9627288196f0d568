package tests

import (
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/orchestrator"
)

// TestMigrateQEMUTracked: a real Linux guest whose workload stores into
// the aperture from its CPU (under TCG those are QEMU's own user-space
// stores; under KVM the guest's through nested paging) migrates A→B and
// back with the log of those writes on and, at each stop, the full hash
// run over every page the log let the scan skip (verify_tracking): a page
// the log missed fails the migration. Each report names uffd-wp in the
// VM's QEMU, and the guest's own checks and final digest pass. Under INTx
// QEMU traps the aperture while an interrupt is pending, so some stores
// reach gmigd as region writes instead, which the engine's marks cover.
func TestMigrateQEMUTracked(t *testing.T) {
	e := needEnv(t)
	for _, c := range []struct {
		machine, irq string
		steps, fps   int
	}{{"pc", "intx", 600, 20}, {"q35", "msi", 1500, 130}} {
		t.Run(c.machine+"-"+c.irq, func(t *testing.T) { migrateBackAndForth(t, e, c.machine, c.irq, c.steps, c.fps, true) })
	}
}

// checkTracked checks that a migration's stop phase trusted a uffd-wp log
// of QEMU's writes and that the full hash confirmed it.
func checkTracked(t *testing.T, rep orchestrator.Report) {
	t.Helper()
	p := rep.Precopy
	if !strings.HasPrefix(p.Tracking, "uffd-wp (pid ") || !p.Stop.WriteLog.Active || !p.Stop.WriteLogVerified {
		t.Fatalf("tracking %q, write log %+v, verified %v; want uffd-wp in QEMU, verified by the full hash",
			p.Tracking, p.Stop.WriteLog, p.Stop.WriteLogVerified)
	}
	if p.Stop.PagesHashed > p.Stop.WriteLog.Written {
		t.Errorf("the stop phase hashed %d pages, more than the %d the log reported", p.Stop.PagesHashed, p.Stop.WriteLog.Written)
	}
	t.Logf("tracking: %s", p.TrackingLine())
}
