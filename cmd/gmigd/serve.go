package main

import (
	"context"
	"errors"
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
	"github.com/gmig-dev/gmig/internal/cmdline"
	"github.com/gmig-dev/gmig/internal/sdnotify"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
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
		if n == 0 {
			return fmt.Errorf("%s: size 0: want a size (e.g. 64M)", v)
		}
		c.MemSize = n
	}
	*s = append(*s, c)
	return nil
}

// MigrateAddrFile is the file in the run directory where serve writes the
// address its migration listener got (useful with port 0).
const MigrateAddrFile = "migrate.addr"

const serveUsage = `usage: gmigd serve [flags]

Runs the daemon: the graphics-memory pool, vGPUs and their vfio-user
sockets, the control API on RUN-DIR/gmigd.sock and, with -migrate-listen,
incoming migrations. SIGINT or SIGTERM shuts it down; SIGHUP reloads the
migration certificates. -config FILE reads these flags from FILE.`

func cmdServe(args []string) error {
	fs := newFlagSet("serve", serveUsage)
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
	gpu := registerGPU(fs, true)
	config := registerConfig(fs)
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	if err := applyConfig(fs, *config); err != nil {
		return err
	}
	if poolSize == 0 {
		return badUsage(fs, "-pool 0: want a size (e.g. 1G)")
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
	h, err := hostd.New(gpu.config(hostd.Config{PoolSize: uint64(poolSize), RunDir: *runDir, Log: log, QEMURoot: qemu.Root(*qemuRoot), Transport: transport, Timeouts: timeouts, Streams: *streams}))
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
	g.Go(func() error { return watchHUP(ctx, log, mig.reloader(transport)) })
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
	notify(log, sdnotify.Ready) // the control socket and the migration listener accept
	<-ctx.Done()
	notify(log, sdnotify.Stopping)
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info().Msg("shutting down")
	return err
}

// defaultQEMURoot is the provisioned root: qemu-root under
// cmdline.DefaultCache ($GMIG_CACHE, or .cache beside bin/, or ./.cache).
func defaultQEMURoot() string { return filepath.Join(cmdline.DefaultCache(), "qemu-root") }
