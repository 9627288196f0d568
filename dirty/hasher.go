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
// (engine.GPUHasher).
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
