package orchestrator

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// TestProgressInOrder: snapshots reach the callback in the order they
// were taken, phase changes and periodic ones racing: a phase never comes
// back after the next one was reported.
func TestProgressInOrder(t *testing.T) {
	const phases, emitters = 300, 4
	var (
		mu   sync.Mutex
		last = -1
		bad  []string
	)
	r := newReporter("m", func(p Progress) {
		n, err := strconv.Atoi(p.Phase)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && n < last {
			bad = append(bad, p.Phase+" after "+strconv.Itoa(last))
		}
		last = max(last, n)
	}, func() VMMProgress {
		runtime.Gosched() // between a snapshot and its delivery
		return VMMProgress{}
	})
	r.enter("0")
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range emitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					r.emit() // as the periodic snapshots do
				}
			}
		}()
	}
	for i := 1; i < phases; i++ {
		r.enter(strconv.Itoa(i))
	}
	close(done)
	wg.Wait()
	r.close()
	if len(bad) > 0 {
		t.Errorf("%d phases reported out of order, e.g. %s", len(bad), bad[0])
	}
}
