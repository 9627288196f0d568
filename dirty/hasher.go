package dirty

import (
	"context"
	"fmt"
)

// PageHasher computes HashPage (xxhash64) of whole pages of a tracked
// memory, wherever that runs: the tracker does not care, and because the
// function is the same, hashes recorded on the CPU, hashes a scan
// computes elsewhere and the hashes the migration stream carries all
// agree. A GPU implementation lives with the NVIDIA back end
// (nvidia.GPUHasher, engine/nvidia).
type PageHasher interface {
	// Name says where hashing runs, for reports: "cpu", "cuda".
	Name() string
	// HashPages sets out[i] to HashPage of page pages[i] of the memory the
	// hasher was made for; with pages nil, out[p] for every page p. It may
	// run concurrently with writers of that memory (a page being written
	// hashes as some mix of old and new bytes, as in Scan).
	HashPages(pages []int, out []uint64) error
}

// hashCandidates is the part of a scan the hasher does: the pages whose
// content must be hashed (every other source already decided), hashed in
// one call, and compared with their records.
func (t *Tracker) hashCandidates(ctx context.Context, cand []int, found []uint64, counts *[NumSources]int) (int, error) {
	if len(cand) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	out := make([]uint64, len(cand))
	if err := t.hasher.HashPages(cand, out); err != nil {
		return 0, fmt.Errorf("dirty: %s hasher: %w", t.hasher.Name(), err)
	}
	for i, p := range cand {
		if out[i] != t.hashes[p].Load() {
			found[p>>6] |= 1 << (p & 63)
			counts[Hash]++
		}
	}
	return len(cand), nil
}

// cpuHasher is PageHasher on the CPU: workers goroutines, xxhash64.
type cpuHasher struct {
	t *Tracker // for forChunks and the page buffers; only mem is read
}

// NewCPUHasher returns a PageHasher over mem (whole pages) that hashes on
// workers goroutines (0: GOMAXPROCS), as a Tracker does by itself.
func NewCPUHasher(mem []byte, workers int) (PageHasher, error) {
	t, err := New(mem, Options{Workers: workers, SampleWords: -1})
	if err != nil {
		return nil, err
	}
	return cpuHasher{t}, nil
}

func (h cpuHasher) Name() string { return "cpu" }

func (h cpuHasher) HashPages(pages []int, out []uint64) error {
	t := h.t
	n := t.pages
	if pages != nil {
		if err := t.checkPages(pages); err != nil {
			return err
		}
		n = len(pages)
	}
	if len(out) < n {
		return fmt.Errorf("dirty: %d hashes wanted into %d slots", n, len(out))
	}
	return t.forChunks(context.Background(), n, scanChunk, t.workers, func(_, lo, hi int, buf []byte) {
		for i := lo; i < hi; i++ {
			p := i
			if pages != nil {
				p = pages[i]
			}
			copyPage(buf, t.page(p))
			out[i] = HashPage(buf)
		}
	})
}

// splitHasher hashes with two hashers at once.
type splitHasher struct {
	a, b  PageHasher
	share float64 // of the pages, b's
	pages int
}

// SplitHasher returns a PageHasher that hashes with a and b at the same
// time, over the same memory of pages pages: b takes the share (0..1) of
// the pages asked for at the end of the list, a the rest. With rates ra
// and rb, share rb/(ra+rb) finishes both together: a CPU's workers and a
// GPU reading the same host memory, say.
func SplitHasher(a, b PageHasher, share float64, pages int) PageHasher {
	return splitHasher{a: a, b: b, share: min(1, max(0, share)), pages: pages}
}

func (s splitHasher) Name() string { return s.a.Name() + "+" + s.b.Name() }

func (s splitHasher) HashPages(pages []int, out []uint64) error {
	n := s.pages
	if pages != nil {
		n = len(pages)
	}
	if len(out) < n {
		return fmt.Errorf("dirty: %d hashes wanted into %d slots", n, len(out))
	}
	k := n - int(float64(n)*s.share)
	var pa, pb []int
	if pages != nil {
		pa, pb = pages[:k], pages[k:]
	} else {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		pa, pb = all[:k], all[k:]
	}
	var errB error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if len(pb) > 0 {
			errB = s.b.HashPages(pb, out[k:n])
		}
	}()
	var errA error
	if len(pa) > 0 {
		errA = s.a.HashPages(pa, out[:k])
	}
	<-done
	if errA != nil {
		return fmt.Errorf("dirty: %s: %w", s.a.Name(), errA)
	}
	if errB != nil {
		return fmt.Errorf("dirty: %s: %w", s.b.Name(), errB)
	}
	return nil
}
