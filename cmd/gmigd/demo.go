package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"gmig/hostd"
	"gmig/vgpu"
)

// cmdDemo runs a whole host in one process: a pool with two vGPUs (so the
// demo's lands at a nonzero pool offset), each on its vfio-user socket, and
// the built-in guest simulator driving one of them over that socket.
func cmdDemo(args []string) error {
	var g guestRun
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	mem := byteSize(64 << 20)
	fs.Var(&mem, "mem", "the demo vGPU's graphics memory")
	logLevel := fs.String("log-level", "warn", "gmigd log level")
	g.flags(fs, 300)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	runDir, err := os.MkdirTemp("", "gmig-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(runDir)
	h, err := hostd.New(hostd.Config{PoolSize: 2*uint64(mem) + 16<<20, RunDir: runDir, Log: log})
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := h.Create(vgpu.Config{Name: "neighbour", MemSize: 16 << 20}); err != nil {
		return err
	}
	info, err := h.Create(vgpu.Config{Name: "demo", MemSize: uint64(mem)})
	if err != nil {
		return err
	}
	fmt.Printf("gmigd demo: pool %d MiB; vGPU %q (%d MiB at pool offset %#x) on %s\n",
		h.Pool().Size()>>20, info.Name, info.MemSize>>20, info.PoolOffset, info.Socket)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g.socket = info.Socket
	t0 := time.Now()
	runErr := g.run(ctx, os.Stdout)
	st, err := h.Get("demo")
	if err != nil {
		return err
	}
	fmt.Printf("\ndevice: %d fences, %d failed commands (the suite provokes some on purpose), %d MiB written by the engine; %s in all\n",
		st.Stats.Fences, st.Stats.Faults, st.Stats.BytesWritten>>20, time.Since(t0).Round(time.Millisecond))
	fmt.Println("live migration of this vGPU arrives with the migration engine (precopy/); this demo exercises the device it will move.")
	return runErr
}
