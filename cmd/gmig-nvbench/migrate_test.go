package main

import (
	"context"
	"errors"
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
	const size, frac, seed = 16 << 20, 0.01, 1
	want, err := referencePages(ctx, zerolog.Nop(), size, frac, seed)
	if err != nil {
		t.Fatal(err)
	}
	r, err := downtimeRun(ctx, zerolog.Nop(), gp, size, frac, "oneshot", 0.4, seed, want)
	if err != nil {
		t.Fatal(err)
	}
	s := r.rep.Precopy.Stop
	if max(1, s.Streams) != precopy.DefaultStreams() || !s.WriteLog.Active || !r.same {
		t.Fatalf("stop phase on %d stream(s), write log %+v (%s), memory equal %v; want %d streams, the log active, equal",
			s.Streams, s.WriteLog, r.rep.Precopy.TrackingLine(), r.same, precopy.DefaultStreams())
	}
}
