package nvidia

import (
	"fmt"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// diffList finds the pages whose hashes differ between two per-page hash
// arrays on the device (gmig_diff_hashes): the kernel appends each such
// page to a list in device memory, counting them with an atomic there, and
// two copies bring the count and then the list back through pinned host
// memory. The list and its counter live on the device, not in mapped host
// memory: an atomic on host memory crosses PCIe and they serialise on the
// one counter (16 GiB of local memory with 1 % of its pages changed: 55 ms
// on the H200, most of the stop phase's hash-and-compare; on the device
// the counter's atomics cost microseconds).
type diffList struct {
	n    uint64      // hashes per array, the list's capacity
	dev  cuda.DevPtr // 4*(n+1) bytes: the count, then the pages
	host []byte      // pinned: the same, as read back
}

// newDiffList allocates a list for arrays of n hashes.
func newDiffList(d gpuDevice, n uint64) (*diffList, error) {
	l := &diffList{n: n}
	var err error
	if l.dev, err = d.Alloc(4 * (n + 1)); err != nil {
		return nil, err
	}
	if l.host, _, err = d.AllocHostMapped(4 * (n + 1)); err != nil {
		_ = d.Free(l.dev)
		return nil, err
	}
	return l, nil
}

// free releases the list's memory (nil: nothing).
func (l *diffList) free(d gpuDevice) error {
	if l == nil {
		return nil
	}
	err := d.Free(l.dev)
	if e := d.FreeHost(l.host); err == nil {
		err = e
	}
	return err
}

// run compares a and b (n hashes each, n at most the list's capacity) on
// stream s, waits, and returns the pages whose hashes differ, in no
// particular order: a view of pinned memory, valid until the next run.
func (l *diffList) run(g *GPU, d gpuDevice, s cuda.Stream, a, b cuda.DevPtr, n uint64) ([]uint32, error) {
	if n > l.n {
		return nil, fmt.Errorf("nvidia: comparing %d page hashes in a list of %d", n, l.n)
	}
	words := u32Words(l.host)
	words[0] = 0
	if err := d.CopyHtoD(l.dev, l.host[:4], s); err != nil {
		return nil, err
	}
	if err := d.Launch(g.fn.diffHashes, g.gridFor(n), blockThreads, s,
		uint64(a), uint64(b), n, uint64(l.dev)+4, uint64(l.dev)); err != nil {
		return nil, err
	}
	if err := d.CopyDtoH(l.host[:4], l.dev, s); err != nil {
		return nil, err
	}
	if err := d.Sync(s); err != nil {
		return nil, err
	}
	k := uint64(words[0])
	if k > n {
		return nil, fmt.Errorf("nvidia: the page comparison counted %d changed pages of %d", k, n)
	}
	if k > 0 {
		if err := d.CopyDtoH(l.host[4:4+4*k], l.dev+4, s); err != nil {
			return nil, err
		}
		if err := d.Sync(s); err != nil {
			return nil, err
		}
	}
	return words[1 : 1+k], nil
}
