package main

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
)

// machineRates are this machine's rates for what a stop phase does, in
// bytes per second, measured in the benchmark's own run (before each
// case), so each downtime sits beside the limit of the same moment.
type machineRates struct {
	Workers int `json:"workers"`
	// Scan is xxhash64 over pages in place on Workers goroutines
	// (dirty.MeasureScanRate): the final scan's own path.
	Scan float64 `json:"scan_Bps"`
	// HashCopy is copy-then-hash on Workers goroutines
	// (dirty.MeasureHashRate): the path of a scan while the VM runs.
	HashCopy float64 `json:"hash_copy_Bps"`
	// Link is one TCP stream over loopback, writer and reader in this
	// process (as the in-process migration's); Links[n-1] is n streams
	// at once (orchestrator.MeasureLimitRates).
	Link  float64   `json:"link_Bps"`
	Links []float64 `json:"links_Bps"`
	// Read is reading memory on Workers goroutines: the limit's rate for
	// what the final scan must read.
	Read float64 `json:"read_Bps"`
	// Memcpy is one goroutine copying memory (the destination writes
	// each page once).
	Memcpy float64 `json:"memcpy_Bps"`
	// Load1 is the 1-minute load average when measured.
	Load1 float64   `json:"load1"`
	At    time.Time `json:"at"`
}

// rateBuf is the memory the hash rates are measured over: 64 MiB, beyond
// caches.
const rateBuf = 64 << 20

// measureRates measures the machine's rates now.
func measureRates(workers int) (machineRates, error) {
	r := machineRates{Workers: workers, At: time.Now(), Load1: loadAvg()}
	mem := make([]byte, rateBuf)
	fillRandom(mem)
	r.Scan = dirty.MeasureScanRate(mem, workers)
	r.HashCopy = dirty.MeasureHashRate(mem, workers)
	lr, err := orchestrator.MeasureLimitRates(context.Background(), orchestrator.TCP{}, workers, precopy.MaxDefaultStreams)
	r.Read, r.Memcpy, r.Links, r.Link = lr.Read, lr.Memcpy, lr.Link, lr.LinkRate(1)
	return r, err
}

func fillRandom(b []byte) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// loadAvg is the 1-minute load average (0 if unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// limitEstimate is the physical limit of a vGPU stop phase on this
// machine (orchestrator.StopLimit): reading the pages the final scan must
// hash at the memory read rate, the stop phase's bytes over the measured
// loopback link of its streams, and the same bytes written into the
// destination at memcpy speed, one after the other. It covers the vGPU's
// stop phase only (quiesce, scan, transfer, restore, replay and the
// stream's tail: docs/benchmarks.md), not the VMM's pause, switchover and
// load, the commit, the PCI front end's restore or the resume. A stop
// phase that overlaps its parts can beat it.
type limitEstimate struct {
	Hash    time.Duration `json:"hash_ns"`
	Link    time.Duration `json:"link_ns"`
	Restore time.Duration `json:"restore_ns"`
}

// Total is the limit.
func (l limitEstimate) Total() time.Duration { return l.Hash + l.Link + l.Restore }

// estimateLimit computes the limit for pagesHashed pages hashed and
// stopBytes stream bytes sent in the stop phase on streams streams.
func estimateLimit(r machineRates, pagesHashed int, stopBytes uint64, streams int) limitEstimate {
	links := r.Links
	if len(links) == 0 && r.Link > 0 {
		links = []float64{r.Link}
	}
	l := orchestrator.LimitRates{Read: r.Read, Memcpy: r.Memcpy, Link: links}.
		Limit(uint64(pagesHashed)*dirty.PageSize, stopBytes, streams)
	return limitEstimate{Hash: l.Scan, Link: l.Link, Restore: l.Restore}
}

// estimateLinkGBps is the measured loopback rate of streams streams, in
// GB/s.
func (r machineRates) estimateLinkGBps(streams int) float64 {
	return orchestrator.LimitRates{Link: r.Links}.LinkRate(streams) / 1e9
}
