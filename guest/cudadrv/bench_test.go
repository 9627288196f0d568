package cudadrv

import (
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/vgpu"
)

// Benchmarks of the library over the simulator (vfio-user in process):
// what a launch and a host copy cost through cudadrv, with the doorbell
// and register accesses a guest pays as trapped accesses here paid as
// socket messages. Run them one at a time:
//
//	go test -run '^$' -bench 'Launch|Copy' -benchtime 2s ./guest/cudadrv

// BenchmarkLaunchGrid is empty-kernel launches through LAUNCH_GRID, then
// one synchronize: launches/s counts the device's running them until the
// synchronize returned, submitted/s the library's calls alone (what a
// program that does not wait sees).
func BenchmarkLaunchGrid(b *testing.B) {
	l := newGridLib(b, Config{})
	f := loadFunction(b, l, "empty")
	benchLaunches(b, l, f, nil)
}

// BenchmarkLaunch is the same through the LAUNCH path of today's CUDA
// model (CAPS without bit 7): the module "scale" over 0 threads, which
// runs no block.
func BenchmarkLaunch(b *testing.B) {
	l, f, _ := scaleLib(b, Config{})
	benchLaunches(b, l, f, paramBuf(uint64(0), uint64(0), uint64(0), uint32(1)))
}

func benchLaunches(b *testing.B, l *Lib, f Handle, params []byte) {
	one := [3]uint32{1, 1, 1}
	must(b, l.CtxSynchronize(thread))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if r := l.LaunchKernel(thread, f, one, one, 0, 0, params); r != Success {
			b.Fatal(r.Error())
		}
	}
	submitted := time.Since(start)
	must(b, l.CtxSynchronize(thread))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "launches/s")
	b.ReportMetric(float64(b.N)/submitted.Seconds(), "submitted/s")
}

// copyBytes is each copy's size: 64 MiB, the most the benchmark vGPU's
// GTT maps of device-local memory beside a 16 MiB aperture (65536 entries,
// 256 MiB, in all) with room to spare.
const copyBytes = 64 << 20

// BenchmarkCopyHtoD and BenchmarkCopyDtoH are host copies of copyBytes to
// and from device-local memory, staged through the aperture (COPY) or DMA
// memory (DMA_TO_GFX/DMA_FROM_GFX), and to aperture memory (a CPU copy,
// the vGPU without CAPS bit 6), in GB/s.
func BenchmarkCopyHtoD(b *testing.B) { benchCopies(b, true) }

func BenchmarkCopyDtoH(b *testing.B) { benchCopies(b, false) }

func benchCopies(b *testing.B, toDevice bool) {
	for _, c := range []struct {
		name  string
		local bool
		dma   bool
	}{{"local-aperture", true, false}, {"local-dma", true, true}, {"aperture", false, false}} {
		b.Run(c.name, func(b *testing.B) {
			var l *Lib
			if c.local {
				l = initLocalLib(b, vgpu.Config{MemSize: 16 << 20, LocalMemSize: copyBytes + 16<<20, GTTEntries: abi.GTTMaxEntries}, Config{DMACopies: c.dma})
			} else {
				l = initLibConfig(b, vgpu.Config{MemSize: 2 * copyBytes}, Config{})
			}
			p, r := l.MemAlloc(thread, copyBytes)
			must(b, r)
			host := pattern(copyBytes, 1)
			b.SetBytes(copyBytes)
			b.ResetTimer()
			for range b.N {
				if toDevice {
					r = l.MemcpyHtoD(thread, p, host)
				} else {
					r = l.MemcpyDtoH(thread, host, p)
				}
				if r != Success {
					b.Fatal(r.Error())
				}
			}
			must(b, l.CtxSynchronize(thread))
		})
	}
}
