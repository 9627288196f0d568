package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/bytesize"
	"github.com/gmig-dev/gmig/internal/inproc"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// burstSpec is the dirty profile: once the pre-copy is done, the guest's
// CPU stores one word into each of a set of pages spread over the whole
// vGPU — a percentage of its pages, or a fixed number of bytes' worth —
// and the VM pauses. Every strategy and vGPU size then has exactly those
// pages dirty at the stop, the same dirty bytes where Bytes is set.
type burstSpec struct {
	Pct   float64 `json:"pct,omitempty"`   // percent of the vGPU's pages
	Bytes uint64  `json:"bytes,omitempty"` // or this many bytes of pages
}

// burstProfile is the dirty profile's name in -profiles and -mem-profile.
const burstProfile = "dirty"

// parseBurst reads "dirty:pct=P" or "dirty:bytes=SIZE" (commas may stand
// for the colons).
func parseBurst(s string) (burstSpec, error) {
	var b burstSpec
	name, kv, _ := strings.Cut(strings.ReplaceAll(s, ",", ":"), ":")
	if name != burstProfile {
		return b, fmt.Errorf("gmig-bench: %q is not a %s profile", s, burstProfile)
	}
	k, v, ok := strings.Cut(kv, "=")
	switch {
	case ok && k == "pct":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 100 || math.IsNaN(f) {
			return b, fmt.Errorf("gmig-bench: %s pct=%q: want a percentage in (0, 100]", burstProfile, v)
		}
		b.Pct = f
	case ok && k == "bytes":
		n, err := bytesize.Parse(v)
		if err != nil || n < abi.PageSize {
			return b, fmt.Errorf("gmig-bench: %s bytes=%q: want a size of at least one page (%v)", burstProfile, v, err)
		}
		b.Bytes = n
	default:
		return b, fmt.Errorf("gmig-bench: profile %q: want %s:pct=P or %s:bytes=SIZE", s, burstProfile, burstProfile)
	}
	return b, nil
}

// String is the spec as parseBurst reads it.
func (b burstSpec) String() string {
	if b.Bytes > 0 {
		return fmt.Sprintf("%s:bytes=%s", burstProfile, shortSize(b.Bytes))
	}
	return fmt.Sprintf("%s:pct=%s", burstProfile, strconv.FormatFloat(b.Pct, 'g', -1, 64))
}

// shortSize writes n as bytesize.Parse reads it, in the largest exact
// unit.
func shortSize(n uint64) string {
	for _, u := range []struct {
		shift uint
		s     string
	}{{30, "G"}, {20, "M"}, {10, "K"}} {
		if n%(1<<u.shift) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + u.s
		}
	}
	return strconv.FormatUint(n, 10)
}

// pages is how many of a vGPU's pages the burst dirties (at most those
// it may write).
func (b burstSpec) pages(mem uint64, free int) int {
	n := int(b.Bytes / abi.PageSize)
	if b.Pct > 0 {
		n = int(math.Round(b.Pct / 100 * float64(mem/abi.PageSize)))
	}
	return min(max(n, 1), free)
}

// burst is a planned burst: the pages, one word in each, the word's value
// before and after.
type burst struct {
	pages []int    // aperture page numbers, ascending
	off   []int    // byte offset of the word in its page
	old   []uint64 // the word before the burst
	val   []uint64 // what the guest stores (never old)
	h0    []uint64 // every page's hash before the burst
}

// planBurst picks b's pages uniformly over mem (the vGPU's memory, in
// aperture page order) but skip, by selection sampling (Knuth's
// algorithm S: exactly n pages, in order, spread over the whole range),
// and records every page's hash and each word as they are now.
func planBurst(b burstSpec, mem []byte, skip map[int]bool, seed int64, workers int) (*burst, error) {
	total := len(mem) / abi.PageSize
	n := b.pages(uint64(len(mem)), total-len(skip))
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6275727374)) // "burst"
	out := &burst{}
	left := total - len(skip)
	for p := 0; p < total && len(out.pages) < n; p++ {
		if skip[p] {
			continue
		}
		if rng.IntN(left) < n-len(out.pages) {
			off := 8 * rng.IntN(abi.PageSize/8)
			old := binary.LittleEndian.Uint64(mem[p*abi.PageSize+off:])
			val := rng.Uint64()
			if val == old {
				val = ^old
			}
			out.pages, out.off, out.old, out.val = append(out.pages, p), append(out.off, off), append(out.old, old), append(out.val, val)
		}
		left--
	}
	var err error
	out.h0, err = hashAll(mem, workers)
	return out, err
}

// write stores the burst's words through the guest's aperture.
func (b *burst) write(ap []byte) {
	for i, p := range b.pages {
		binary.LittleEndian.PutUint64(ap[p*abi.PageSize+b.off[i]:], b.val[i])
	}
}

// check compares a destination's memory with the source's before the
// burst and the burst's words: every page the burst left alone hashes as
// before; each page it wrote holds its word, and with the old word put
// back hashes as before.
func (b *burst) check(mem []byte, workers int) error {
	got, err := hashAll(mem, workers)
	if err != nil {
		return err
	}
	if len(got) != len(b.h0) {
		return fmt.Errorf("gmig-bench: destination has %d pages, source %d", len(got), len(b.h0))
	}
	wrote := make(map[int]int, len(b.pages))
	for i, p := range b.pages {
		wrote[p] = i
	}
	var page [abi.PageSize]byte
	for p := range got {
		i, ok := wrote[p]
		if !ok {
			if got[p] != b.h0[p] {
				return fmt.Errorf("gmig-bench: page %d differs on the destination (the burst did not write it)", p)
			}
			continue
		}
		copy(page[:], mem[p*abi.PageSize:])
		if w := binary.LittleEndian.Uint64(page[b.off[i]:]); w != b.val[i] {
			return fmt.Errorf("gmig-bench: page %d holds %#x at %d on the destination, the guest stored %#x", p, w, b.off[i], b.val[i])
		}
		binary.LittleEndian.PutUint64(page[b.off[i]:], b.old[i])
		if dirty.HashPage(page[:]) != b.h0[p] {
			return fmt.Errorf("gmig-bench: page %d differs on the destination beyond the guest's word", p)
		}
	}
	return nil
}

func hashAll(mem []byte, workers int) ([]uint64, error) {
	h, err := dirty.NewCPUHasher(mem, workers)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(mem)/abi.PageSize)
	return out, h.HashPages(nil, out)
}

// driverPages are the aperture pages the guest's driver uses (its ring
// and fence slot): the burst leaves them alone.
func driverPages(d *guest.Driver) (map[int]bool, error) {
	skip := map[int]bool{}
	base, size := d.Ring()
	for ga := base &^ (abi.PageSize - 1); ga < base+uint64(size); ga += abi.PageSize {
		off, err := d.ApertureOffset(ga)
		if err != nil {
			return nil, err
		}
		skip[int(off/abi.PageSize)] = true
	}
	off, err := d.ApertureOffset(d.FenceSlot())
	if err != nil {
		return nil, err
	}
	skip[int(off/abi.PageSize)] = true
	return skip, nil
}

// migrateBurst migrates a vGPU of bc.Mem (prefilled to -fill) whose guest
// runs no workload but, once the pre-copy is done, stores the burst, then
// pauses; the destination's memory is checked against the source's and
// the burst (burst.check).
func (c *benchConfig) migrateBurst(ctx context.Context, bc benchCase, v benchVariant) (benchResult, error) {
	res := benchResult{Case: bc, Variant: v.String(), Strategy: v.Strategy, FullHash: v.FullHash}
	p, err := inproc.New(bc.Mem+(32<<20), c.log, nil)
	if err != nil {
		return res, err
	}
	defer p.Close()
	if _, err := p.Hosts[0].Create(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}); err != nil {
		return res, err
	}
	dirtied := make(chan struct{})
	hold := func(*sim.VM) (<-chan struct{}, error) { return dirtied, nil } // the pause waits for the burst
	vm, _, err := p.StartVM(p.Hosts[0], vgpu.Config{Name: "bench", MemSize: bc.Mem}, c.fill, c.seed, guest.WorkloadConfig{}, hold)
	if err != nil {
		return res, err
	}
	defer vm.Close()
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	defer stopBeat()
	src, err := p.Hosts[0].VGPU("bench")
	if err != nil {
		return res, err
	}
	skip, err := driverPages(vm.Driver())
	if err != nil {
		return res, err
	}
	b, err := planBurst(*bc.Burst, src.Memory(), skip, c.seed, c.workerCount())
	if err != nil {
		return res, err
	}
	res.BurstPages = len(b.pages)
	var once sync.Once
	rep, err := p.Migrate(ctx, 0, "bench", hostd.MigrateOptions{
		Precopy:    precopy.Options{Strategy: v.Strategy, Workers: c.workers, SerialStop: v.Serial, Streams: c.streams},
		NoTracking: v.FullHash,
		Progress: func(pr orchestrator.Progress) {
			if pr.Phase == orchestrator.PhaseVMMLive { // the vGPU's pre-copy is done
				once.Do(func() {
					go func() {
						b.write(vm.Driver().Bus().Aperture())
						close(dirtied)
					}()
				})
			}
		},
	})
	res.setReport(rep)
	if err != nil {
		return res, err
	}
	dst, err := p.Hosts[1].VGPU("bench")
	if err != nil {
		return res, err
	}
	if err := b.check(dst.Memory(), c.workerCount()); err != nil {
		return res, err
	}
	res.DigestOK = true
	return res, nil
}
