package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/dirty"
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
	// process (as the in-process migration's).
	Link float64 `json:"link_Bps"`
	// Memcpy is one goroutine copying memory (the destination writes
	// each page once).
	Memcpy float64 `json:"memcpy_Bps"`
	// Load1 is the 1-minute load average when measured.
	Load1 float64   `json:"load1"`
	At    time.Time `json:"at"`
}

// rateBuf is the memory the rates are measured over: 64 MiB, beyond
// caches.
const rateBuf = 64 << 20

// measureRates measures the machine's rates now.
func measureRates(workers int) (machineRates, error) {
	r := machineRates{Workers: workers, At: time.Now(), Load1: loadAvg()}
	mem := make([]byte, rateBuf)
	fillRandom(mem)
	r.Scan = dirty.MeasureScanRate(mem, workers)
	r.HashCopy = dirty.MeasureHashRate(mem, workers)
	r.Memcpy = measureMemcpy(mem)
	var err error
	r.Link, err = measureLink(mem[:1<<20], 256<<20)
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

// measureMemcpy copies src into another buffer of its size for at least
// 100 ms and returns bytes copied per second.
func measureMemcpy(src []byte) float64 {
	dst := make([]byte, len(src))
	copy(dst, src) // fault it in
	start := time.Now()
	var n float64
	for n == 0 || time.Since(start) < 100*time.Millisecond {
		copy(dst, src)
		n += float64(len(src))
	}
	return n / time.Since(start).Seconds()
}

// measureLink sends total bytes over one loopback TCP connection in
// writes of len(chunk) and returns bytes per second, from the first write
// to the reader having read the last byte.
func measureLink(chunk []byte, total int) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		// Read into one buffer of the writer's size (io.Discard's own
		// ReadFrom would read 8 KiB at a time and measure its syscalls).
		buf := make([]byte, len(chunk))
		for left := total; left > 0; {
			n, err := c.Read(buf[:min(len(buf), left)])
			if err != nil {
				got <- err
				return
			}
			left -= n
		}
		got <- nil
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	for sent := 0; sent < total; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			return 0, fmt.Errorf("loopback rate: %w", err)
		}
	}
	if err := <-got; err != nil {
		return 0, fmt.Errorf("loopback rate: %w", err)
	}
	return float64(total) / time.Since(start).Seconds(), nil
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
// machine: hashing the pages the final scan must hash at the in-place
// scan rate, the stop phase's bytes over the measured link, and the same
// bytes written into the destination at memcpy speed, one after the
// other. It covers the vGPU's stop phase only (quiesce, scan, transfer,
// restore, replay and the stream's tail: docs/benchmarks.md), not the
// VMM's pause, switchover and load, the commit, the PCI front end's
// restore or the resume. A stop phase that overlaps its parts can beat it.
type limitEstimate struct {
	Hash    time.Duration `json:"hash_ns"`
	Link    time.Duration `json:"link_ns"`
	Restore time.Duration `json:"restore_ns"`
}

// Total is the limit.
func (l limitEstimate) Total() time.Duration { return l.Hash + l.Link + l.Restore }

// estimateLimit computes the limit for pagesHashed pages hashed and
// stopBytes stream bytes sent in the stop phase.
func estimateLimit(r machineRates, pagesHashed int, stopBytes uint64) limitEstimate {
	at := func(bytes float64, rate float64) time.Duration {
		if rate <= 0 || bytes <= 0 {
			return 0
		}
		return time.Duration(bytes / rate * float64(time.Second))
	}
	return limitEstimate{
		Hash:    at(float64(pagesHashed)*dirty.PageSize, r.Scan),
		Link:    at(float64(stopBytes), r.Link),
		Restore: at(float64(stopBytes), r.Memcpy),
	}
}
