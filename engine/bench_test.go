package engine

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// benchBufs returns a pool and two buffers of n bytes in it: one extent
// each, or (frag) one scrambled extent per 4 KiB page.
func benchBufs(n uint64, frag bool) ([]byte, []gtt.Extent, []gtt.Extent) {
	pages := 2 * n / abi.PageSize
	mem := make([]byte, 2*n)
	rng := rand.New(rand.NewPCG(1, 1))
	randFloats(rng, mem)
	if !frag {
		return mem, []gtt.Extent{{Off: 0, Len: n}}, []gtt.Extent{{Off: n, Len: n}}
	}
	perm := rng.Perm(int(pages))
	var a, b []gtt.Extent
	for i, p := range perm {
		x := gtt.Extent{Off: uint64(p) * abi.PageSize, Len: abi.PageSize}
		if uint64(i) < pages/2 {
			a = append(a, x)
		} else {
			b = append(b, x)
		}
	}
	return mem, a, b
}

const benchBytes = 4 << 20

func benchKernels(b *testing.B, frag bool) {
	mem, x, y := benchBufs(benchBytes, frag)
	sw := NewSoftware(mem)
	b.Run("Saxpy", func(b *testing.B) {
		b.SetBytes(2 * benchBytes)
		for b.Loop() {
			if err := sw.Saxpy(benchBytes/4, 1.0001, x, y); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Stencil", func(b *testing.B) {
		b.SetBytes(2 * benchBytes)
		for b.Loop() {
			if err := sw.Stencil(1024, benchBytes/4/1024, x, y); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Render", func(b *testing.B) {
		b.SetBytes(benchBytes)
		for b.Loop() {
			if err := sw.Render(1024, benchBytes/4/1024, 7, y); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Copy", func(b *testing.B) {
		b.SetBytes(benchBytes)
		for b.Loop() {
			if err := sw.Copy(y, x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Fill", func(b *testing.B) {
		b.SetBytes(benchBytes)
		for b.Loop() {
			if err := sw.Fill(y, 0x3f800000); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSoftware(b *testing.B)           { benchKernels(b, false) }
func BenchmarkSoftwareFragmented(b *testing.B) { benchKernels(b, true) }

// BenchmarkSaxpy is the contiguous SAXPY alone, for quick comparisons.
func BenchmarkSaxpy(b *testing.B) {
	mem, x, y := benchBufs(benchBytes, false)
	sw := NewSoftware(mem)
	b.SetBytes(2 * benchBytes)
	for b.Loop() {
		if err := sw.Saxpy(benchBytes/4, 1.0001, x, y); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEngineSmallFill measures per-command overhead through the ring: fetch,
// decode, retire, with the scrambled test GTT.
func BenchmarkEngineSmallFill(b *testing.B) {
	h := newHarness(b, 1, 1<<16)
	batch := make([]Command, 1000)
	for i := range batch {
		batch[i] = Fill{Dst: tDataGA, Len: 8, Pattern: uint32(i)}
	}
	ctx := context.Background()
	for b.Loop() {
		h.push(batch...)
		h.doorbell()
		if err := h.e.WaitIdle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/cmd")
}
