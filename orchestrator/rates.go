package orchestrator

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// The physical limit of a vGPU stop phase on this machine, measured in the
// caller's run: reading the memory the final scan must still read, the
// dirty bytes over the stop phase's N streams on loopback through the
// migration's own transport, and writing them into the destination at
// memcpy rate, one after the other (docs/migration-protocol.md §6). A stop
// phase that overlaps its parts can beat it.

// LimitRates are the rates a stop phase's limit is made of, in bytes per
// second.
type LimitRates struct {
	// Read is reading memory on Workers goroutines, the most a scan of
	// it can run at.
	Read    float64 `json:"read_Bps"`
	Workers int     `json:"workers"`
	// Memcpy is one goroutine copying memory: the destination writes
	// each page once.
	Memcpy float64 `json:"memcpy_Bps"`
	// Link[n-1] is n streams at once over the transport on loopback,
	// writer and reader in this process.
	Link []float64 `json:"link_Bps"`
}

// rateBuf is the memory the rates are measured over: 64 MiB, beyond
// caches.
const rateBuf = 64 << 20

// linkBytes is what each link measurement sends in all: 256 MiB, a few
// hundred milliseconds at loopback rates.
const linkBytes = 256 << 20

// MeasureLimitRates measures the limit's rates now: memory read on
// workers goroutines, memcpy, and 1 … maxStreams streams over t on
// loopback.
func MeasureLimitRates(ctx context.Context, t Transport, workers, maxStreams int) (LimitRates, error) {
	if t == nil {
		t = TCP{}
	}
	workers, maxStreams = max(1, workers), max(1, maxStreams)
	mem := make([]byte, rateBuf)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(mem); i += 8 {
		binary.LittleEndian.PutUint64(mem[i:], rng.Uint64())
	}
	r := LimitRates{Workers: workers, Read: MeasureRead(mem, workers), Memcpy: MeasureMemcpy(mem)}
	for n := 1; n <= maxStreams; n++ {
		rate, err := MeasureLink(ctx, t, n, mem[:1<<20], linkBytes)
		if err != nil {
			return r, err
		}
		r.Link = append(r.Link, rate)
	}
	return r, nil
}

// LinkRate is the rate of n streams (the largest measured if n is
// beyond them; 0 if none was).
func (r LimitRates) LinkRate(n int) float64 {
	if len(r.Link) == 0 {
		return 0
	}
	return r.Link[min(max(n, 1), len(r.Link))-1]
}

// StopLimit is a stop phase's physical limit, term by term.
type StopLimit struct {
	Scan    time.Duration `json:"scan_ns"`    // what must be scanned, at Read
	Link    time.Duration `json:"link_ns"`    // the stop phase's bytes over its streams
	Restore time.Duration `json:"restore_ns"` // the same bytes at Memcpy
}

// Total is the limit.
func (l StopLimit) Total() time.Duration { return l.Scan + l.Link + l.Restore }

// Limit is the limit of a stop phase that scans scanBytes of memory and
// sends stopBytes on streams streams.
func (r LimitRates) Limit(scanBytes, stopBytes uint64, streams int) StopLimit {
	at := func(bytes uint64, rate float64) time.Duration {
		if rate <= 0 || bytes == 0 {
			return 0
		}
		return time.Duration(float64(bytes) / rate * float64(time.Second))
	}
	return StopLimit{
		Scan:    at(scanBytes, r.Read),
		Link:    at(stopBytes, r.LinkRate(streams)),
		Restore: at(stopBytes, r.Memcpy),
	}
}

// measureFor runs pass over and over for at least 100 ms and returns the
// bytes per second it covered, n bytes a pass.
func measureFor(n int, pass func()) float64 {
	pass() // fault it in, warm it
	start := time.Now()
	var done float64
	for done == 0 || time.Since(start) < 100*time.Millisecond {
		pass()
		done += float64(n)
	}
	return done / time.Since(start).Seconds()
}

// MeasureRead returns the rate at which workers goroutines read mem (each
// a share of it, 8 bytes at a time).
func MeasureRead(mem []byte, workers int) float64 {
	share := (len(mem)/workers + 7) &^ 7
	var sink uint64
	var mu sync.Mutex
	return measureFor(len(mem), func() {
		var wg sync.WaitGroup
		for lo := 0; lo < len(mem); lo += share {
			part := mem[lo:min(lo+share, len(mem))]
			wg.Go(func() {
				var x uint64
				for i := 0; i+8 <= len(part); i += 8 {
					x ^= binary.LittleEndian.Uint64(part[i:])
				}
				mu.Lock()
				sink ^= x
				mu.Unlock()
			})
		}
		wg.Wait()
	})
}

// MeasureMemcpy returns the rate at which one goroutine copies src into
// another buffer of its size.
func MeasureMemcpy(src []byte) float64 {
	dst := make([]byte, len(src))
	return measureFor(len(src), func() { copy(dst, src) })
}

// MeasureLink sends total bytes over n connections of t on loopback at
// once, each a share in writes of len(chunk), and returns bytes per
// second from the first write to the readers having read the last byte.
func MeasureLink(ctx context.Context, t Transport, n int, chunk []byte, total int) (float64, error) {
	l, err := t.Listen("127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	share := total / n / len(chunk) * len(chunk)
	if share == 0 {
		return 0, fmt.Errorf("orchestrator: link rate: %d bytes on %d streams of %d-byte writes", total, n, len(chunk))
	}
	read := make(chan error, n)
	go func() {
		for range n {
			c, err := l.Accept()
			if err != nil {
				read <- err
				continue
			}
			go func() {
				defer c.Close()
				// Read into one buffer of the writer's size
				// (io.Discard's own ReadFrom reads 8 KiB at a time and
				// would measure its system calls).
				_, err := io.CopyBuffer(io.Discard, io.LimitReader(onlyReader{c}, int64(share)), make([]byte, len(chunk)))
				read <- err
			}()
		}
	}()
	conns := make([]net.Conn, n)
	for i := range conns {
		if conns[i], err = t.Dial(ctx, l.Addr().String()); err != nil {
			return 0, err
		}
		defer conns[i].Close()
	}
	start := time.Now()
	wrote := make(chan error, n)
	for _, c := range conns {
		go func() {
			for sent := 0; sent < share; sent += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					wrote <- err
					return
				}
			}
			wrote <- nil
		}()
	}
	for range 2 * n {
		select {
		case err = <-wrote:
		case err = <-read:
		}
		if err != nil {
			return 0, fmt.Errorf("orchestrator: link rate on %d streams: %w", n, err)
		}
	}
	return float64(share*n) / time.Since(start).Seconds(), nil
}

// onlyReader hides a connection's WriteTo, so that io.CopyBuffer uses the
// buffer it is given.
type onlyReader struct{ io.Reader }
