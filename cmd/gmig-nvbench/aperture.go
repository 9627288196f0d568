package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/cmdline"
)

// cmdAperture measures what the NVIDIA back end's coherence with the
// aperture costs: the same commands on the software back end, on the
// NVIDIA back end writing back at fences (the default) and writing back
// after every command, over buffers scattered page by page across the
// window as a guest's GTT scatters them.
func cmdAperture(args []string) error {
	fs := flag.NewFlagSet("aperture", flag.ContinueOnError)
	win := cmdline.ByteSize(256 << 20)
	fs.Var(&win, "window", "graphics memory bytes")
	side := fs.Uint("grid", 2048, "stencil grid side (float32 cells)")
	iters := fs.Int("iters", 20, "stencil steps between fences")
	if err := fs.Parse(args); err != nil {
		return err
	}
	window := (*uint64)(&win)
	g, err := openGPU()
	if err != nil {
		return err
	}
	mem, err := unix.Mmap(-1, 0, int(*window), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	rng := rand.New(rand.NewPCG(1, 2))
	perm := rng.Perm(int(*window / 4096))
	next := 0
	// buf returns extents for n bytes on the next pages of the permutation.
	buf := func(n uint64) []gtt.Extent {
		var xs []gtt.Extent
		for ; n > 0; next++ {
			l := min(n, 4096)
			xs = append(xs, gtt.Extent{Off: uint64(perm[next]) * 4096, Len: l})
			n -= l
		}
		return xs
	}
	w, h := uint32(*side), uint32(*side)
	nb := uint64(4 * w * h)
	in, out := buf(nb), buf(nb)
	x, y := buf(nb), buf(nb)
	cpu := make([]byte, nb)
	for i := 0; i < len(cpu); i += 4 {
		binary.LittleEndian.PutUint32(cpu[i:], math.Float32bits(float32(rng.NormFloat64())))
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Printf("%s window, %dx%d float32 grid (%s per buffer), buffers scattered page by page\n", fmtSize(*window), w, h, fmtSize(nb))
	fmt.Fprintln(tw, "back end\tstencil ms/step\tfence ms\tsaxpy after CPU write ms\tfence ms\tread back ms\twindow read GB/s\twritten back MiB\t")
	type backend struct {
		name string
		b    engine.Backend
		nv   *nvidia.NVIDIA
	}
	var bes []backend
	bes = append(bes, backend{"software", engine.NewSoftware(mem), nil})
	for _, wb := range []struct {
		name string
		m    nvidia.WriteBack
	}{{"nvidia, write back at fences", nvidia.WriteBackFence}, {"nvidia, write back per command", nvidia.WriteBackCommand}} {
		// A window of its own: one memory is page-locked by one back end.
		w, err := unix.Mmap(-1, 0, int(*window), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		defer unix.Munmap(w)
		nv, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{GPU: g, Window: w, WriteBack: wb.m})
		if err != nil {
			return err
		}
		defer nv.Close()
		bes = append(bes, backend{wb.name, nv, nv})
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, be := range bes {
		b := be.b
		if err := b.Write(in, cpu); err != nil {
			return err
		}
		if err := b.Stencil(w, h, in, out); err != nil { // warm up
			return err
		}
		_ = b.Sync()
		var before nvidia.NVIDIAStats
		if be.nv != nil {
			before = be.nv.Stats()
		}
		t := time.Now()
		for i := range *iters {
			src, dst := in, out
			if i%2 == 1 {
				src, dst = out, in
			}
			if err := b.Stencil(w, h, src, dst); err != nil {
				return err
			}
		}
		step := time.Since(t) / time.Duration(*iters)
		t = time.Now()
		if err := b.Sync(); err != nil {
			return err
		}
		fence := time.Since(t)

		// The guest CPU writes x and y through the aperture, a SAXPY reads
		// them, a fence, the CPU reads y back.
		if err := b.Write(x, cpu); err != nil {
			return err
		}
		if err := b.Write(y, cpu); err != nil {
			return err
		}
		t = time.Now()
		if err := b.Saxpy(nb/4, 1.5, x, y); err != nil {
			return err
		}
		saxpy := time.Since(t)
		t = time.Now()
		if err := b.Sync(); err != nil {
			return err
		}
		fence2 := time.Since(t)
		t = time.Now()
		if err := b.Read(cpu[:nb], y); err != nil {
			return err
		}
		read := time.Since(t)
		rd, wbk := "-", "-"
		if be.nv != nil {
			st := be.nv.Stats()
			rd = fmt.Sprintf("%.1f", float64(st.HostReadBytes-before.HostReadBytes)/(float64(*iters)*step.Seconds()+saxpy.Seconds())/1e9)
			wbk = fmt.Sprintf("%.1f", float64(st.WriteBackBytes-before.WriteBackBytes)/(1<<20))
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t\n", be.name, ms(step), ms(fence), ms(saxpy), ms(fence2), ms(read), rd, wbk)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return moduleOverhead(g, *window)
}

// nopPTX is a guest module that does nothing: its launch costs the
// back end's whole-memory sync and the two hashing passes only.
const nopPTX = `.version 7.0
.target sm_80
.address_size 64
.visible .entry nop(.param .u64 base, .param .u64 threads)
{
	ret;
}
`

// moduleOverhead times a guest module's launch: every byte of the window
// uploaded, every page of the mirror hashed before and after.
func moduleOverhead(g *nvidia.GPU, window uint64) error {
	mem, err := unix.Mmap(-1, 0, int(window), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	nv, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{GPU: g, Window: mem, Modules: true})
	if err != nil {
		return err
	}
	defer nv.Close()
	if err := nv.LoadModule(1, engine.Module{Handle: 1, Entry: "nop", PTX: []byte(nopPTX), Args: 1}); err != nil {
		return err
	}
	if _, err := nv.LaunchModule(1, []uint64{1}); err != nil {
		return err
	}
	const n = 5
	t := time.Now()
	for range n {
		if _, err := nv.LaunchModule(1, []uint64{1}); err != nil {
			return err
		}
	}
	el := time.Since(t) / n
	fmt.Printf("guest module launch over a %s window: %.3f ms (whole-window upload at %.1f GB/s equivalent, plus two hashing passes)\n",
		fmtSize(window), float64(el.Microseconds())/1000, float64(window)/el.Seconds()/1e9)
	return nil
}
