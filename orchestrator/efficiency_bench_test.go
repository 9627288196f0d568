package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// BenchmarkStopEfficiency is the stop phase's efficiency on N streams:
// a stop-and-copy stop phase of a 256 MiB vGPU whose every page is random
// (every page hashed by the final scan and sent in the downtime), source
// and destination in this process over loopback TCP, beside the loopback
// rate of the same N streams (MeasureLink, the limit's link term) measured
// right after it in the same run. It reports the stop phase's rate
// (stream bytes over Stop's wall time), the link's and their ratio
// (efficiency; issue 16's target is 0.8 on 8 streams):
//
//	go test -run '^$' -bench StopEfficiency -benchtime 10x ./orchestrator/
//
// GOMAXPROCS decides the scan's workers (precopy.Options.Workers) and so
// whether the stop phase is pipelined (precopy.PipelineMinWorkers), as in
// gmigd.
func BenchmarkStopEfficiency(b *testing.B) {
	const mem = 256 << 20
	src, dst := migtest.RandomPair(b, mem)
	m := src.Memory()
	chunk := make([]byte, 1<<20)
	copy(chunk, m)
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			b.SetBytes(mem)
			var bytes uint64
			var took, cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				s, recv := stopCopyPair(b, src, dst, n)
				b.StartTimer()
				t, c := time.Now(), cpuTime(b)
				rep, err := s.Stop(context.Background())
				d, dc := time.Since(t), cpuTime(b)-c
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if err := <-recv; err != nil {
					b.Fatal(err)
				}
				bytes += rep.Stop.Bytes
				took += d
				cpu += dc
				s.Close()
				src.Resume()
				b.StartTimer()
			}
			b.StopTimer()
			c := cpuTime(b)
			link, err := MeasureLink(context.Background(), TCP{}, n, chunk, linkBytes)
			if err != nil {
				b.Fatal(err)
			}
			linkCPU := cpuTime(b) - c
			stop := float64(bytes) / took.Seconds()
			b.ReportMetric(stop/1e9, "stop_GB/s")
			b.ReportMetric(link/1e9, "link_GB/s")
			b.ReportMetric(stop/link, "efficiency")
			// CPU time per byte, every thread of the process: what
			// bounds the rate where the cores are all busy (8 streams
			// on 16 cores), and a measure that other load on a shared
			// machine disturbs less than wall time.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(bytes), "stop_cpu_ns/B")
			b.ReportMetric(float64(linkCPU.Nanoseconds())/float64(n*(linkBytes/n/len(chunk)*len(chunk))), "link_cpu_ns/B")
		})
	}
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stopCopyPair starts a stop-and-copy migration from src to dst on n
// loopback TCP streams and runs its (empty) pre-copy: what is left is
// Stop. The receiver's error comes on the channel.
func stopCopyPair(b *testing.B, src, dst *vgpu.VGPU, n int) (*precopy.Source, <-chan error) {
	b.Helper()
	ctx := context.Background()
	a, c := migtest.TCPPair(b)
	conns := make([]io.ReadWriter, n-1)
	next := make(chan net.Conn, n)
	for i := range conns {
		x, y := migtest.TCPPair(b)
		conns[i] = x
		next <- y
	}
	recv := make(chan error, 1)
	incoming := &logWatch{msg: `"message":"migration incoming"`, seen: make(chan struct{})}
	go func() {
		_, err := precopy.Receive(ctx, c, dst, precopy.Options{Log: zerolog.New(incoming), Streams: n,
			NextStream: func(context.Context) (io.Reader, error) { return <-next, nil }})
		recv <- err
	}()
	s, err := precopy.NewSource(src, a, precopy.Options{Strategy: precopy.StopCopy, Streams: n, Log: migtest.Log})
	if err == nil {
		err = s.AddStreams(conns...)
	}
	if err == nil {
		err = s.Precopy(ctx)
	}
	if err != nil {
		b.Fatal(err)
	}
	// The destination has read the begin Meta and faulted its memory in
	// (a pre-copy's first step, long before a real stop phase), so the
	// stop phase timed is the stop phase alone.
	select {
	case <-incoming.seen:
	case err := <-recv:
		b.Fatalf("destination ended before the stop phase: %v", err)
	}
	return s, recv
}

// logWatch is a log writer that closes seen at the first line holding
// msg.
type logWatch struct {
	msg  string
	seen chan struct{}
	once sync.Once
}

func (w *logWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.msg)) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}
