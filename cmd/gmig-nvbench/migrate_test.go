package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/precopy"
)

// TestMigrateModel runs `gmig-nvbench migrate` small on the software model
// of a GPU (GMIG_CUDA_MODEL=1): the workload migrations through the
// orchestrator must end with the reference digest on a destination vGPU
// that is on the CUDA back end too, and every downtime run's destination
// memory must equal a run never migrated, a framebuffer rendered at the
// pause included (cmdMigrate returns an error otherwise).
func TestMigrateModel(t *testing.T) {
	t.Setenv("GMIG_CUDA_MODEL", "1")
	err := cmdMigrate([]string{"-workload-mem", "4M", "-steps", "40", "-sizes", "16M", "-dirty", "0.6",
		"-strategies", "oneshot,oneshot+gpu,oneshot+split,stopcopy"})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateModelTwoGPUs runs `gmig-nvbench migrate -gpus 0,1
// -round-trip` small on two model GPUs: the source's vGPU on GPU 0, the
// destination's on GPU 1, the workload's way back landing on GPU 0 again
// with the reference digest, and the downtime run's destination memory
// equal to a run never migrated (cmdMigrate returns an error otherwise);
// a GPU the machine lacks is refused before anything runs.
func TestMigrateModelTwoGPUs(t *testing.T) {
	t.Setenv(nvidia.ModelEnv, "2")
	err := cmdMigrate([]string{"-gpus", "0," + nvidia.ModelUUID(1), "-round-trip", "-workload-mem", "4M", "-steps", "40",
		"-sizes", "16M", "-dirty", "0.01", "-strategies", "oneshot"})
	if err != nil {
		t.Fatal(err)
	}
	err = cmdMigrate([]string{"-gpus", "0,2", "-skip-workload", "-sizes", "16M", "-dirty", "0.01", "-strategies", "oneshot"})
	if !errors.Is(err, hostd.ErrNoGPU) {
		t.Fatalf("-gpus 0,2 on two GPUs: %v, want ErrNoGPU", err)
	}
}

// TestDowntimeRunDefaults: a downtime run migrates as gmigd migrate does,
// the stop phase's pages on precopy.DefaultStreams streams and the
// guest's aperture stores logged (the table's streams and tracking
// columns show both), with the destination's memory equal to a run never
// migrated.
func TestDowntimeRunDefaults(t *testing.T) {
	t.Setenv(nvidia.ModelEnv, "1")
	ctx := context.Background()
	gp, err := parseGPUs("")
	if err != nil {
		t.Fatal(err)
	}
	const size, seed = 16 << 20, 1
	frac := dirtyAmount{frac: 0.01}
	want, err := referencePages(ctx, zerolog.Nop(), size, frac, seed)
	if err != nil {
		t.Fatal(err)
	}
	r, err := downtimeRun(ctx, zerolog.Nop(), gp, size, frac, "oneshot", 0.4, seed, want, false)
	if err != nil {
		t.Fatal(err)
	}
	s := r.rep.Precopy.Stop
	if max(1, s.Streams) != precopy.DefaultStreams() || !s.WriteLog.Active || !r.same {
		t.Fatalf("stop phase on %d stream(s), write log %+v (%s), memory equal %v; want %d streams, the log active, equal",
			s.Streams, s.WriteLog, r.rep.Precopy.TrackingLine(), r.same, precopy.DefaultStreams())
	}
}

// TestDowntimeTracking runs the downtime matrix with -tracking both and a
// dirty size on the software model of a GPU: every run's destination
// memory equals a run never migrated (downtimeMatrix fails otherwise),
// oneshot runs with the log and without it, stopcopy once, and the last
// table sets the two side by side; bad -dirty and -tracking values are
// refused.
func TestDowntimeTracking(t *testing.T) {
	t.Setenv(nvidia.ModelEnv, "1")
	gp, err := parseGPUs("")
	if err != nil {
		t.Fatal(err)
	}
	amounts, err := parseDirty("1M,0.01")
	if err != nil || len(amounts) != 2 || amounts[0].bytesOf(16<<20) != 1<<20 || amounts[1].bytesOf(16<<20) != (16<<20)/100 {
		t.Fatalf("parseDirty: %v, %v", amounts, err)
	}
	modes, err := parseTracking("both")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := downtimeMatrix(context.Background(), &out, zerolog.Nop(), gp, []uint64{16 << 20}, amounts[:1], []string{"oneshot", "stopcopy"}, modes, 0.4, 1); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	side := s[strings.Index(s, "the guest-write log beside the full hash"):]
	for _, want := range []string{"oneshot+hash", "write log", "full hash", "log / hash"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if !regexp.MustCompile(`16M +1M +oneshot +[0-9.]+ \(`).MatchString(side) || strings.Contains(s, "stopcopy+hash") {
		t.Errorf("side-by-side table:\n%s", s)
	}
	for _, bad := range []string{"2", "-0.1", "1X", "0M"} {
		if _, err := parseDirty(bad); err == nil {
			t.Errorf("-dirty %s accepted", bad)
		}
	}
	if _, err := parseTracking("maybe"); err == nil {
		t.Error("-tracking maybe accepted")
	}
}
