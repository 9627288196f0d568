package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

const jobJSON = `{"id":"0123456789abcdef","vm":"vm1","peer":"10.0.0.2:7010","strategy":"oneshot","phase":"vgpu-precopy",` +
	`"started":"2026-11-25T12:00:00Z","elapsed_ns":1500000000,"vgpu_bytes":1048576,"ram_bytes":0,"bytes":1048576,` +
	`"vgpu_rate":20971520,"ram_rate":0,"bandwidth":20971520,"max_downtime_ns":50000000,` +
	`"estimate":{"dirty_pages":10,"dirty_rate":100,"link":20971520,"scan_ns":1000000,"transfer_ns":2000000,"vmm_ns":20000000,"total_ns":23000000,"rounds":1}}`

// TestMigrateStatusCommand: migrate-status lists the daemon's migrations
// as a table, describes one by ID or VM, and --json passes them on.
func TestMigrateStatusCommand(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"GET /v1/migrations":      answer(http.StatusOK, "["+jobJSON+"]"),
		"GET /v1/migrations/vm1":  answer(http.StatusOK, jobJSON),
		"GET /v1/migrations/nope": answer(http.StatusNotFound, `{"error":"hostd: no such migration: \"nope\""}`),
	})
	code, out, errOut := runCLI(t, "migrate-status", "-run-dir", d.dir)
	t.Logf("gmigd migrate-status:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 || !slices.Contains(strings.Fields(lines[0]), "ESTIMATE") ||
		!strings.Contains(lines[1], "0123456789abcdef") || !strings.Contains(lines[1], "vgpu-precopy") || !strings.Contains(lines[1], "23.0 ms") {
		t.Errorf("migrate-status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "migrate-status", "vm1", "-run-dir", d.dir)
	t.Logf("gmigd migrate-status vm1:\n%s", out)
	if code != exitOK || !strings.Contains(out, "migration 0123456789abcdef of VM vm1") ||
		!strings.Contains(out, "bandwidth limit 20.0 MiB/s") || !strings.Contains(out, "estimated stop phase 23.00 ms") {
		t.Errorf("migrate-status vm1: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "migrate-status", "--json", "-run-dir", d.dir)
	var jobs []struct{ ID, Phase string }
	if err := json.Unmarshal([]byte(out), &jobs); code != exitOK || err != nil || len(jobs) != 1 || jobs[0].Phase != "vgpu-precopy" {
		t.Errorf("migrate-status --json: exit %d, %v\n%s", code, err, out)
	}
	if code, _, errOut = runCLI(t, "migrate-status", "nope", "-run-dir", d.dir); code != exitFailed || !strings.Contains(errOut, "no such migration") {
		t.Errorf("migrate-status nope: exit %d: %s", code, errOut)
	}
	if code, _, _ = runCLI(t, "migrate-status", "a", "b", "-run-dir", d.dir); code != exitUsage {
		t.Errorf("migrate-status a b: exit %d, want %d", code, exitUsage)
	}
}

// TestMigrateCancelCommand: migrate-cancel asks the daemon to cancel by
// ID or VM; a refusal after the commit exits 1 and says "committed".
func TestMigrateCancelCommand(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"POST /v1/migrations/vm1/cancel": answer(http.StatusAccepted, jobJSON),
		"POST /v1/migrations/late/cancel": answer(http.StatusConflict,
			`{"error":"hostd: cancelling migration late: orchestrator: the migration is committed"}`),
	})
	code, out, errOut := runCLI(t, "migrate-cancel", "vm1", "-run-dir", d.dir)
	if code != exitOK || !strings.Contains(out, "cancelled in phase vgpu-precopy") {
		t.Errorf("migrate-cancel vm1: exit %d\n%s%s", code, out, errOut)
	}
	if reqs := d.requests(); len(reqs) != 1 || reqs[0] != `POST /v1/migrations/vm1/cancel {"reason":"cancelled by the operator"}` {
		t.Errorf("asked %q", reqs)
	}
	code, _, errOut = runCLI(t, "migrate-cancel", "late", "-run-dir", d.dir)
	if code != exitFailed || !strings.Contains(errOut, "committed") {
		t.Errorf("migrate-cancel late: exit %d: %s", code, errOut)
	}
	if code, _, _ = runCLI(t, "migrate-cancel", "-run-dir", d.dir); code != exitUsage {
		t.Errorf("migrate-cancel without ID: exit %d, want %d", code, exitUsage)
	}
}

// TestMigrateSetBandwidthCommand: migrate-set-bandwidth sends the rate in
// bytes/s; a rate that is not one is refused before anything is sent.
func TestMigrateSetBandwidthCommand(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"POST /v1/migrations/vm1/bandwidth": answer(http.StatusOK, jobJSON),
	})
	code, out, errOut := runCLI(t, "migrate-set-bandwidth", "vm1", "20M/s", "-run-dir", d.dir)
	if code != exitOK || !strings.Contains(out, "bandwidth limit 20.0 MiB/s") {
		t.Errorf("migrate-set-bandwidth: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ = runCLI(t, "migrate-set-bandwidth", "vm1", "fast", "-run-dir", d.dir); code != exitUsage {
		t.Errorf("RATE fast: exit %d, want %d", code, exitUsage)
	}
	if reqs := d.requests(); len(reqs) != 1 || reqs[0] != `POST /v1/migrations/vm1/bandwidth {"bandwidth":20971520}` {
		t.Errorf("asked %q", reqs)
	}
}

// TestMigrateJobFlags: --bandwidth and --max-downtime reach the daemon;
// --dry-run prints the destination's check and exits 0 when it would land,
// 1 when it would not.
func TestMigrateJobFlags(t *testing.T) {
	const checkOK = `{"check":{"id":"c1","peer":"10.0.0.2:7010","ok":true,"items":[{"what":"pool","ok":true,"detail":"60 MiB free in one range, 4 MiB needed"}],` +
		`"estimate":{"link":1e9,"scan_ns":1000000,"total_ns":1000000}},"outcome":"not-started"}`
	const checkFail = `{"check":{"id":"c2","peer":"10.0.0.3:7010","ok":false,"items":[{"what":"pool","ok":false,"detail":"hostd: the pool's largest free range is 2 MiB; the vGPU needs 4 MiB"}],` +
		`"estimate":{}},"error":"orchestrator: the destination's check failed: pool: no room","outcome":"not-started"}`
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"POST /v1/vms/vm1/migrate": func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				To     string `json:"to"`
				DryRun bool   `json:"dry_run"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			switch {
			case req.DryRun && req.To == "10.0.0.2:7010":
				answer(http.StatusOK, checkOK)(w, r)
			case req.DryRun:
				answer(http.StatusOK, checkFail)(w, r)
			default:
				answer(http.StatusOK, `{"report":{"id":"m1"},"outcome":"migrated"}`)(w, r)
			}
		},
	})
	code, _, errOut := runCLI(t, "migrate", "vm1", "--to", "10.0.0.2:7010", "--bandwidth", "100M", "--max-downtime", "50ms", "-run-dir", d.dir)
	if code != exitOK {
		t.Errorf("migrate: exit %d: %s", code, errOut)
	}
	if reqs := d.requests(); len(reqs) != 1 || !strings.Contains(reqs[0], `"bandwidth":104857600`) || !strings.Contains(reqs[0], `"max_downtime_ms":50`) {
		t.Errorf("asked %q", reqs)
	}
	code, out, errOut := runCLI(t, "migrate", "vm1", "--to", "10.0.0.2:7010", "--dry-run", "-run-dir", d.dir)
	if code != exitOK || !strings.Contains(out, "ok   pool") || !strings.Contains(out, "would land; nothing was moved") {
		t.Errorf("migrate --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "migrate", "vm1", "--to", "10.0.0.3:7010", "--dry-run", "-run-dir", d.dir)
	if code != exitFailed || !strings.Contains(out, "FAIL pool") || !strings.Contains(errOut, "check failed") {
		t.Errorf("migrate --dry-run to a full host: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ = runCLI(t, "migrate", "vm1", "--to", "10.0.0.2:7010", "--max-downtime", "-1s", "-run-dir", d.dir); code != exitUsage {
		t.Errorf("--max-downtime -1s: exit %d, want %d", code, exitUsage)
	}
}
