package hostd

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// soakDuration is -soak or GMIG_SOAK; TestSoak skips without either.
func soakDuration(t *testing.T) time.Duration {
	if *soakFlag > 0 {
		return *soakFlag
	}
	if s := os.Getenv("GMIG_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("GMIG_SOAK=%q: %v", s, err)
		}
		return d
	}
	t.Skip("a soak test: run with -soak=30m or GMIG_SOAK=30m (make soak)")
	return 0
}

// usage is what the process holds, sampled with no migration in flight.
type usage struct {
	at         time.Duration
	moves      int64
	heap       uint64 // live heap after a GC (HeapAlloc)
	sys        uint64 // memory obtained from the OS by the Go runtime
	fds        int
	goroutines int
	rss        string
}

func sampleUsage(start time.Time, moves int64) usage {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u := usage{at: time.Since(start), moves: moves, heap: ms.HeapAlloc, sys: ms.Sys, goroutines: runtime.NumGoroutine()}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		u.fds = len(ents)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				u.rss = strings.TrimSpace(v)
			}
		}
	}
	return u
}

func (u usage) String() string {
	return fmt.Sprintf("t=%s migrations=%d heap=%s sys=%s fds=%d goroutines=%d rss=%s",
		u.at.Round(time.Second), u.moves, mib(u.heap), mib(u.sys), u.fds, u.goroutines, u.rss)
}

func mib(n uint64) string { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }

// TestSoak is the load test run for a long time (-soak or GMIG_SOAK):
// sixteen VMs run their checked workloads without end while four workers
// migrate them back and forth between two gmigd, each its own four VMs in
// turn. Every soakSample the workers stop between migrations and the
// process's heap, descriptors and goroutines are sampled; from the sample
// taken once every VM has migrated to the last they stay within the soak
// bounds. At the end every VM's graphics memory equals its workload's
// reference model and VMs of one seed that ran the same steps agree.
func TestSoak(t *testing.T) {
	d := soakDuration(t)
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	r := newLoadRig(t, ctx)
	start := time.Now()
	stop := make(chan struct{})
	done := r.workloads(ctx, 0, stop)

	// hold stops the workers between migrations while a sample is taken.
	var hold sync.RWMutex
	end := start.Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, loadInFlight)
	for w := range loadInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				v := r.vms[w+loadInFlight*(i%(loadVMs/loadInFlight))]
				hold.RLock()
				err := r.migrate(ctx, v)
				hold.RUnlock()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var samples []usage
	var warm *usage
	tick := time.NewTicker(soakSample)
	defer tick.Stop()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
loop:
	for {
		select {
		case <-tick.C:
		case <-finished:
			break loop
		case err := <-errs:
			t.Fatal(err)
		case err := <-done:
			t.Fatalf("workloads: %v", err)
		}
		hold.Lock()
		u := sampleUsage(start, r.moves.Load())
		hold.Unlock()
		samples = append(samples, u)
		t.Logf("soak: %s", u)
		if warm == nil && u.moves >= loadVMs {
			w := u
			warm = &w
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last := sampleUsage(start, r.moves.Load())
	t.Logf("soak: %s (end)", last)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workloads: %v", err)
	}
	r.checkDigests(nil)
	var steps uint64
	for _, v := range r.vms {
		steps += v.vm.Workload().Steps()
	}
	t.Logf("soak: %s, %d migrations (%d rolled back), %d workload steps, first sample %s, warm %v, last %s",
		time.Since(start).Round(time.Second), r.moves.Load(), r.fails.Load(), steps, samples[0], warm, last)
	if warm == nil {
		t.Fatal("the soak ended before every VM had migrated: run it longer")
	}
	if last.fds > warm.fds+soakFDSlack {
		t.Errorf("open descriptors grew from %d to %d", warm.fds, last.fds)
	}
	if last.goroutines > warm.goroutines+soakGoroutineSlack {
		t.Errorf("goroutines grew from %d to %d", warm.goroutines, last.goroutines)
	}
	if float64(last.heap) > soakHeapFactor*float64(warm.heap)+soakHeapSlack {
		t.Errorf("live heap grew from %s to %s", mib(warm.heap), mib(last.heap))
	}
}
