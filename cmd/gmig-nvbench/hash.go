package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/dirty"
)

// cmdHash measures page hashing (xxhash64 of 4096-byte pages): the GPU
// kernel over device memory, the same kernel over page-locked host memory
// it reads over PCIe, and the CPU tracker's workers.
func cmdHash(args []string) error {
	fs := flag.NewFlagSet("hash", flag.ContinueOnError)
	dev := sizes{1 << 30, 4 << 30, 16 << 30}
	fs.Var(&dev, "device", "device-memory sizes to hash")
	host := sizes{1 << 30}
	fs.Var(&host, "host", "host-memory sizes to hash (registered with the GPU, read over PCIe)")
	iters := fs.Int("iters", 20, "passes per measurement")
	workers := fs.Int("workers", 0, "CPU hashing workers (default GOMAXPROCS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workers <= 0 {
		*workers = runtime.GOMAXPROCS(0)
	}
	g, err := openGPU()
	if err != nil {
		return err
	}
	d := g.Device()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "memory\tsize\thasher\tpasses\tGB/s\tms/pass\t")
	row := func(mem string, size uint64, who string, n int, el time.Duration) {
		gbs := float64(size) * float64(n) / el.Seconds() / 1e9
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%.3f\t\n", mem, fmtSize(size), who, n, gbs, float64(el.Microseconds())/1000/float64(n))
	}
	for _, size := range dev {
		m, err := d.NewMapping(size, 0)
		if err != nil {
			return fmt.Errorf("%s of device memory: %w", fmtSize(size), err)
		}
		s, _ := d.NewStream()
		_ = d.Memset32(m.Base, 0x9e3779b9, size/4, s)
		_ = d.Sync(s)
		pages := int(size / 4096)
		h, err := g.NewHasher(m.Base, pages)
		if err != nil {
			return err
		}
		out, err := d.Alloc(uint64(8 * pages))
		if err != nil {
			return err
		}
		if err := h.HashInto(out); err != nil { // warm up
			return err
		}
		t := time.Now()
		for range *iters {
			if err := h.HashInto(out); err != nil {
				return err
			}
		}
		row("device", size, "gpu kernel", *iters, time.Since(t))
		// End to end through dirty.PageHasher: a page list in, hashes back.
		hs := make([]uint64, pages)
		t = time.Now()
		for range *iters {
			if err := h.HashPages(nil, hs); err != nil {
				return err
			}
		}
		row("device", size, "gpu PageHasher", *iters, time.Since(t))
		list := make([]int, 0, pages/10)
		for p := 0; p < pages; p += 10 {
			list = append(list, p)
		}
		t = time.Now()
		for range *iters {
			if err := h.HashPages(list, hs); err != nil {
				return err
			}
		}
		row("device", uint64(len(list))*4096, "gpu 10% list", *iters, time.Since(t))
		h.Close()
		_ = d.Free(out)
		_ = d.DestroyStream(s)
		if err := m.Close(); err != nil {
			return err
		}
	}
	for _, size := range host {
		mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = byte(i >> 12)
		}
		if _, err := d.HostRegister(mem); err != nil {
			return err
		}
		pages := int(size / 4096)
		h, err := g.NewHostHasher(mem)
		if err != nil {
			return err
		}
		hs := make([]uint64, pages)
		_ = h.HashPages(nil, hs)
		n := max(1, *iters/4)
		t := time.Now()
		for range n {
			if err := h.HashPages(nil, hs); err != nil {
				return err
			}
		}
		el := time.Since(t)
		row("host", size, "gpu (DMA to staging)", n, el)
		gpuRate := float64(size) * float64(n) / el.Seconds()
		cpu, err := dirty.NewCPUHasher(mem, *workers)
		if err != nil {
			return err
		}
		_ = cpu.HashPages(nil, hs)
		t = time.Now()
		for range n {
			if err := cpu.HashPages(nil, hs); err != nil {
				return err
			}
		}
		el = time.Since(t)
		row("host", size, fmt.Sprintf("cpu %d workers", *workers), n, el)
		cpuRate := float64(size) * float64(n) / el.Seconds()
		share := gpuRate / (gpuRate + cpuRate)
		split := dirty.SplitHasher(cpu, h, share, pages)
		t = time.Now()
		for range n {
			if err := split.HashPages(nil, hs); err != nil {
				return err
			}
		}
		row("host", size, fmt.Sprintf("cpu+gpu (gpu %.0f%%)", 100*share), n, time.Since(t))
		h.Close()
		_ = d.HostUnregister(mem)
		_ = unix.Munmap(mem)
	}
	return tw.Flush()
}
