//go:build cuda

package precopy

// Device-local memory of a cuda vGPU migrating on a real GPU: built only
// with -tags cuda; each test skips, saying why, without a driver or GPU.
// Device addresses are one space per CUDA context (CUDA's unified
// addressing), so a destination in the source's context (isolation
// "shared") cannot have the source's DEVICE_ADDR_BASE: the migration is
// refused and rolls back; a destination in a child process (this test
// binary run again) gets it, as one on another host does, and so does one
// with a GPU worker of its own (isolation "process", the default).

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/cuda"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// destEnv carries the child destination's source address and output file.
const (
	destAddrEnv = "GMIG_TEST_LOCAL_DEST_ADDR"
	destOutEnv  = "GMIG_TEST_LOCAL_DEST_OUT"
)

func needGPU(t *testing.T) {
	t.Helper()
	if _, err := nvidia.OpenGPU(0); errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		t.Skipf("no NVIDIA GPU here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
}

func cudaLocalOn0(t *testing.T, name string, pad uint64) *migtest.Served {
	return localVGPUOn(t, vgpu.Config{Name: name, Backend: vgpu.BackendCUDA}, pad)
}

// sharedLocalOn0 is cudaLocalOn0 in gmigd's own CUDA context.
func sharedLocalOn0(t *testing.T, name string, pad uint64) *migtest.Served {
	return localVGPUOn(t, vgpu.Config{Name: name, Backend: vgpu.BackendCUDA, GPUIsolation: vgpu.IsolationShared}, pad)
}

// behindEngine writes b at local offset off straight through the back
// end, with the engine quiesced: no engine write event, as a guest
// kernel's store.
func behindEngine(t *testing.T, v *vgpu.VGPU, off uint64, b []byte) {
	t.Helper()
	v.Quiesce()
	defer v.Resume()
	must(t, v.GPU().Write([]gtt.Extent{{Off: v.Partition().ApertureEnd() + off, Len: uint64(len(b))}}, b))
}

// TestGPULocalMemoryRefusedInProcess: both vGPUs in one CUDA context on
// one GPU (isolation "shared"): the destination cannot place local memory
// at the source's device address, refuses (nvidia.ErrDeviceAddr) and the
// source runs on.
func TestGPULocalMemoryRefusedInProcess(t *testing.T) {
	needGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := sharedLocalOn0(t, "src", 0), sharedLocalOn0(t, "dst", localGfx)
	localGuest(ctx, t, src)
	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst.V, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
	must(t, err)
	defer s.Close()
	must(t, s.Precopy(ctx))
	if _, err := s.Stop(ctx); err == nil {
		t.Fatal("the migration succeeded into a destination without the source's device address")
	}
	s.Rollback() // half-closes: the destination stops draining
	r := <-recv
	if !errors.Is(r.err, nvidia.ErrDeviceAddr) {
		t.Fatalf("destination: %v, want nvidia.ErrDeviceAddr", r.err)
	}
	t.Logf("refused as expected: %v", r.err)
	src.V.Quiesce()
	if got := gpuLocal(t, src.V); !bytes.Equal(got[8*stream.PageSize:9*stream.PageSize], bytes.Repeat([]byte{0x00, 0xee, 0xff, 0xc0}, stream.PageSize/4)) {
		t.Error("the source's local memory changed in the rollback")
	}
	src.V.Resume()
}

// TestGPULocalMemoryMigratesCUDA: the destination in a child process on
// the same GPU; local pages written after the pre-copy by commands and
// behind the engine's back arrive (the child's whole local memory is
// compared with the source's), found by the GPU hash.
func TestGPULocalMemoryMigratesCUDA(t *testing.T) {
	needGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := cudaLocalOn0(t, "src", 0)
	vm, ga := localGuest(ctx, t, src)
	d := vm.Driver()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	out := filepath.Join(t.TempDir(), "dest-local")
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestGPULocalDestChild$", "-test.v")
	child.Env = append(os.Environ(), destAddrEnv+"="+l.Addr().String(), destOutEnv+"="+out)
	var log bytes.Buffer
	child.Stdout, child.Stderr = &log, &log
	must(t, child.Start())
	conn, err := l.Accept()
	must(t, err)
	defer conn.Close()
	s, err := NewSource(src.V, conn, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
	must(t, err)
	defer s.Close()
	must(t, s.Precopy(ctx))
	const pg = stream.PageSize
	must(t, d.Fill(ga+25*pg+64, 128, 0x11223344)) // local page 25
	must(t, d.Wait(ctx, d.Fence(0)))
	behindEngine(t, src.V, 30*pg+123, []byte("written by a guest kernel")) // local page 30
	behindEngine(t, src.V, localBytes-8, []byte("lastpage"))               // local page 63
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatalf("Stop: %v\nchild:\n%s", err, log.String())
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("destination process: %v\n%s", err, log.String())
	}
	t.Logf("source report:\n%s", rep)
	if rep.Stop.LocalPages != 3 || rep.Stop.LocalMethod != "gpu-hash 256 KiB" {
		t.Errorf("local pages at the stop %d by %q, want 3 by gpu-hash 256 KiB", rep.Stop.LocalPages, rep.Stop.LocalMethod)
	}
	got, err := os.ReadFile(out)
	must(t, err)
	src.V.Quiesce()
	if want := gpuLocal(t, src.V); !bytes.Equal(got, want) {
		t.Fatal("the destination's local memory differs from the source's")
	}
}

// TestGPULocalDestChild is the destination of TestGPULocalMemoryMigratesCUDA
// (run only as its child): it receives into a cuda vGPU with local memory
// and writes that memory, read from the GPU, to the output file.
func TestGPULocalDestChild(t *testing.T) {
	addr, out := os.Getenv(destAddrEnv), os.Getenv(destOutEnv)
	if addr == "" {
		t.Skip("the destination process of TestGPULocalMemoryMigratesCUDA")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dst := cudaLocalOn0(t, "dst", localGfx)
	conn, err := net.Dial("tcp", addr)
	must(t, err)
	defer conn.Close()
	rep, err := Receive(ctx, conn, dst.V, Options{Log: migtest.Log})
	must(t, err)
	t.Logf("destination report:\n%s", rep)
	must(t, os.WriteFile(out, gpuLocal(t, dst.V), 0o600))
}
