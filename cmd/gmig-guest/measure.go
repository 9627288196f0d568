package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sysfs"
)

// measure times trapped MMIO reads and writes and the doorbell round trip
// (a FENCE submitted through the ring until the guest sees it complete), by
// polling and by interrupt, and reports medians and 99th percentiles.
func measure(ctx context.Context, bus guest.Bus, o options) bool {
	n := o.measure
	read := timeN(n, func() error { _, err := bus.ReadReg32(abi.RegID); return err })
	write := timeN(n, func() error { return bus.WriteReg32(abi.RegScratch, 1) })
	report("mmio read: %s", read)
	report("mmio write: %s", write)
	ok := read.err == nil && write.err == nil
	modes := []bool{false}
	if o.irq != sysfs.IRQNone {
		modes = append(modes, true)
	}
	for _, irq := range modes {
		d, err := guest.Open(bus, guest.Options{Seed: o.seed, UseIRQ: irq})
		if err != nil {
			report("doorbell: opening the device: %v", err)
			return false
		}
		rt := timeN(n/4+1, func() error {
			v := d.Fence(abi.FenceInterrupt)
			return d.Wait(ctx, v)
		})
		mode := "polling"
		if irq {
			mode = "interrupt"
		}
		report("doorbell round trip (%s): %s", mode, rt)
		ok = ok && rt.err == nil
	}
	return ok
}

type timing struct {
	n        int
	p50, p99 time.Duration
	err      error
}

func (t timing) String() string {
	if t.err != nil {
		return "error: " + t.err.Error()
	}
	return fmt.Sprintf("n=%d p50=%s p99=%s", t.n, t.p50, t.p99)
}

func timeN(n int, f func() error) timing {
	ds := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			return timing{err: err}
		}
		ds = append(ds, time.Since(t0))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return timing{n: n, p50: ds[n/2], p99: ds[n*99/100]}
}

// workload runs the seeded workload with a heartbeat goroutine and reports
// its digest.
func workload(ctx context.Context, bus guest.Bus, o options) bool {
	d, err := guest.Open(bus, guest.Options{Seed: o.seed, UseIRQ: o.irq != sysfs.IRQNone})
	if err != nil {
		report("workload: opening the device: %v", err)
		return false
	}
	cfg, err := guest.ParseWorkload(o.workload)
	if err != nil {
		report("workload: %v", err)
		return false
	}
	cfg.Check, cfg.CheckTouched = o.check, o.check
	w, err := guest.NewWorkload(o.seed, cfg)
	if err != nil {
		report("workload: %v", err)
		return false
	}
	if o.progress > 0 {
		// A line every o.progress steps, at the step's first operation:
		// hosts use them to act in the middle of the workload.
		var last uint64
		w.SetGate(func(context.Context) error {
			if n := w.Steps(); n != last && n%uint64(o.progress) == 0 {
				last = n
				report("workload step %d", n)
			}
			return nil
		})
	}
	report("workload started seed=%d steps=%d check=%v", o.seed, o.steps, o.check)
	stop := heartbeat(bus, o.heartbeat)
	t0 := time.Now()
	err = w.Run(ctx, d, o.steps)
	stop()
	if err != nil {
		report("workload: %v", err)
		return false
	}
	sum, err := w.Digest(d)
	if err != nil {
		report("workload: digest: %v", err)
		return false
	}
	report("workload seed=%d steps=%d in %s digest=%s", o.seed, o.steps, time.Since(t0).Round(time.Millisecond), hex.EncodeToString(sum[:]))
	return true
}

// heartbeat writes HEARTBEAT every period (0: never) on a goroutine of its
// own, so the host can time the guest's pauses with its clock; stop ends it
// and returns once it has.
func heartbeat(bus guest.Bus, period time.Duration) (stop func()) {
	if period <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for i := uint64(1); ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
				_ = bus.WriteReg64(abi.RegHeartbeat, i)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
