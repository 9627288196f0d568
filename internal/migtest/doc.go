// Package migtest is the harness the migration tests share (precopy,
// precopy/native): pools and vGPUs that close with the test, vGPUs served
// on vfio-user sockets, a vGPU driven directly through its registers (Dev),
// and the simulator's VM (sim.VM) made for a test: a guest running a
// seeded workload whose progress a test can watch and which it can hold at
// an operation boundary (vm.go).
//
// Only tests import it. It must not import package precopy, whose own
// tests use it.
package migtest
