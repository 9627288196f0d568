package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/bytesize"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy"
)

// vgpuSpecs collects repeated --vgpu NAME[:SIZE] flags.
type vgpuSpecs []vgpu.Config

func (s *vgpuSpecs) String() string { return fmt.Sprint(len(*s)) }

func (s *vgpuSpecs) Set(v string) error {
	name, size, found := strings.Cut(v, ":")
	c := vgpu.Config{Name: name}
	if found {
		n, err := bytesize.Parse(size)
		if err != nil {
			return err
		}
		c.MemSize = n
	}
	*s = append(*s, c)
	return nil
}

// MigrateAddrFile is the file in the run directory where serve writes the
// address its migration listener got (useful with port 0).
const MigrateAddrFile = "migrate.addr"

func cmdServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	poolSize := byteSize(hostd.DefaultPoolSize)
	fs.Var(&poolSize, "pool", "graphics memory shared by all vGPUs (e.g. 1G)")
	runDir := fs.String("run-dir", hostd.DefaultRunDir, "directory for the control socket, the vGPUs' vfio-user sockets and the VMs' files")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	migrateListen := fs.String("migrate-listen", "", "accept incoming migrations on this address (host:port; port 0 picks one, written to RUN-DIR/"+MigrateAddrFile+"); needs -tls-cert, -tls-key, -tls-ca or -insecure-migrations")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics (off unless set)")
	qemuRoot := fs.String("qemu-root", defaultQEMURoot(), "the QEMU 11.1 root VMs run from (make provision)")
	var specs vgpuSpecs
	fs.Var(&specs, "vgpu", "create a vGPU at start-up: NAME[:MEMSIZE] (repeatable; default size 64M)")
	var mig migrationTLS
	mig.register(fs)
	var tos migrationTimeouts
	tos.register(fs)
	streams := streamsFlag(fs, fmt.Sprintf("the vGPU stop phase's streams: outgoing migrations open this many connections, incoming ones take at most this many (0: %d out here, half the cores, at most %d; %[2]d in)", precopy.DefaultStreams(), precopy.MaxDefaultStreams))
	if err := fs.Parse(args); err != nil {
		return err
	}
	timeouts, err := tos.timeouts()
	if err != nil {
		return err
	}
	if err := checkStreams(*streams); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	transport, err := mig.transport(log, *migrateListen != "")
	if err != nil {
		return err
	}
	h, err := hostd.New(hostd.Config{PoolSize: uint64(poolSize), RunDir: *runDir, Log: log, QEMURoot: qemu.Root(*qemuRoot), Transport: transport, Timeouts: timeouts, Streams: *streams})
	if err != nil {
		return err
	}
	defer h.Close()
	for _, c := range specs {
		if _, err := h.Create(c); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	l, err := h.ListenAPI(filepath.Join(*runDir, "gmigd.sock"))
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return h.ServeAPI(ctx, l) })
	if *migrateListen != "" {
		ml, err := h.ListenMigrations(*migrateListen)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*runDir, MigrateAddrFile), []byte(ml.Addr().String()+"\n"), 0o644); err != nil {
			return fmt.Errorf("writing the migration address: %w", err)
		}
		g.Go(func() error { return h.ServeMigrations(ctx, ml, nil) })
	}
	if *metricsAddr != "" {
		g.Go(func() error { return h.ServeMetrics(ctx, *metricsAddr) })
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info().Msg("shutting down")
	return err
}

// defaultQEMURoot is the provisioned root: $GMIG_CACHE/qemu-root, or
// .cache/qemu-root beside the binary's bin/ directory (make provision), or
// under the working directory.
func defaultQEMURoot() string {
	if c := os.Getenv("GMIG_CACHE"); c != "" {
		return filepath.Join(c, "qemu-root")
	}
	if exe, err := os.Executable(); err == nil {
		root := filepath.Join(filepath.Dir(filepath.Dir(exe)), ".cache", "qemu-root")
		if _, err := os.Stat(root); err == nil {
			return root
		}
	}
	return filepath.Join(".cache", "qemu-root")
}
