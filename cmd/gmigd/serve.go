package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/vgpu"
)

// vgpuSpecs collects repeated --vgpu NAME[:SIZE] flags.
type vgpuSpecs []vgpu.Config

func (s *vgpuSpecs) String() string { return fmt.Sprint(len(*s)) }

func (s *vgpuSpecs) Set(v string) error {
	name, size, found := strings.Cut(v, ":")
	c := vgpu.Config{Name: name}
	if found {
		n, err := parseSize(size)
		if err != nil {
			return err
		}
		c.MemSize = n
	}
	*s = append(*s, c)
	return nil
}

func cmdServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	poolSize := byteSize(hostd.DefaultPoolSize)
	fs.Var(&poolSize, "pool", "graphics memory shared by all vGPUs (e.g. 1G)")
	runDir := fs.String("run-dir", hostd.DefaultRunDir, "directory for the control socket and the vGPUs' vfio-user sockets")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	var specs vgpuSpecs
	fs.Var(&specs, "vgpu", "create a vGPU at start-up: NAME[:MEMSIZE] (repeatable; default size 64M)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	h, err := hostd.New(hostd.Config{PoolSize: uint64(poolSize), RunDir: *runDir, Log: log})
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
	err = h.ServeAPI(ctx, l)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info().Msg("shutting down")
	return err
}
