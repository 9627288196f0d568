package gpuproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine/nvidia"
)

// WorkerEnv, set in a process's environment, makes it a GPU worker: the
// package's init serves the back end on the descriptors it was handed
// (workerFDs) and exits, before the program's main (or a test binary's
// TestMain) runs. Every program that links this package — gmigd, and the
// test binaries of every package that creates CUDA vGPUs — so carries the
// worker's entry, and the client starts one by re-executing its own
// executable (/proc/self/exe) with WorkerEnv set. The value is the vGPU's
// name, for the worker's logs.
const WorkerEnv = "GMIG_GPU_WORKER"

// The descriptors a worker is handed (exec.Cmd.ExtraFiles, from 3): the
// engine connection, the side connection, the partition's memfd (its
// aperture at offset 0), the bulk buffer's memfd (bulk.go) and the
// comparison connection (the local tracker's Changed and ChangedIn).
const (
	fdEngine = 3
	fdSide   = 4
	fdMemfd  = 5
	fdBulk   = 6
	fdCmp    = 7
)

func init() {
	name, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return
	}
	// gmigd ends its workers (it closes their connections): a signal meant
	// for gmigd (systemd's SIGTERM to the unit's cgroup, a terminal's
	// SIGINT to the process group, a reload's SIGHUP) must not end them
	// under it.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	log := zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Str("gpu_worker", name).Int("pid", os.Getpid()).Logger()
	if err := runWorker(log); err != nil {
		log.Error().Err(err).Msg("gpuproc: GPU worker failed")
		os.Exit(1)
	}
	os.Exit(0)
}

// runWorker serves one back end until the engine connection closes.
func runWorker(log zerolog.Logger) error {
	if err := nvidia.KernelsFromEnv(); err != nil { // a freshly built kernels.ptx, as gmigd's tests load
		return err
	}
	eng, err := fileConn(fdEngine, "engine")
	if err != nil {
		return err
	}
	side, err := fileConn(fdSide, "side")
	if err != nil {
		return err
	}
	cmp, err := fileConn(fdCmp, "comparison")
	if err != nil {
		return err
	}
	window, err := mapMemfd(fdMemfd)
	if err != nil {
		return err
	}
	bulk, err := mapBulk(fdBulk)
	if err != nil {
		return err
	}
	s := &server{log: log, window: window, bulk: bulk, ready: make(chan struct{})}
	for _, c := range []struct {
		f    *os.File
		kind connKind
	}{{side, connSide}, {cmp, connCmp}} {
		go func() {
			if err := s.serve(c.f, c.f, c.kind); err != nil && !errors.Is(err, io.EOF) {
				log.Warn().Err(err).Str("connection", c.kind.String()).Msg("gpuproc: connection failed")
			}
		}()
	}
	err = s.serve(eng, eng, connEngine)
	if cerr := s.close(); cerr != nil {
		log.Warn().Err(cerr).Msg("gpuproc: closing the back end")
	}
	if errors.Is(err, io.EOF) {
		return nil // gmigd closed the connection (or exited)
	}
	return err
}

// fileConn is the blocking socket at descriptor fd (client.go, conn).
func fileConn(fd uintptr, what string) (*os.File, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fd), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, fmt.Errorf("gpuproc: no %s connection at descriptor %d (%v)", what, fd, err)
	}
	return os.NewFile(fd, what), nil
}

// mapMemfd maps the whole memfd at fd, shared, read-write: the same pages
// gmigd and the VMM map.
func mapMemfd(fd int) ([]byte, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("gpuproc: the partition's memfd: %w", err)
	}
	if st.Size <= 0 {
		return nil, fmt.Errorf("gpuproc: the partition's memfd holds %d bytes", st.Size)
	}
	mem, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gpuproc: mapping the partition's memfd (%d bytes): %w", st.Size, err)
	}
	return mem, nil
}
