package main

import "testing"

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
