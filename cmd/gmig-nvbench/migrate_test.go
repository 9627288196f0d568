package main

import (
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/hostd"
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
