package gpuproc

import (
	"fmt"
	"math"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine"
)

// The cost of the process boundary on the CUDA model (where the device
// work itself costs next to nothing, so the ratio is the boundary's
// worst case): LAUNCH_GRID, posted with no round trip, the engine's
// reads around each launch, and a 4 KiB Write (the engine's DMA), each in
// this process and through a GPU worker, side by side.

// backEnds runs bench on the in-process back end and on a worker.
func backEnds(b *testing.B, modules bool, bench func(b *testing.B, s *side)) {
	b.Run("in-process", func(b *testing.B) { bench(b, startInProcess(b, newPool(b), modules)) })
	b.Run("worker", func(b *testing.B) { bench(b, startWorker(b, newPool(b), modules, zerolog.Nop())) })
}

// BenchmarkLaunchGrid: launches of the empty kernel, a Sync every 1000
// (as a FENCE after a batch).
func BenchmarkLaunchGrid(b *testing.B) {
	backEnds(b, true, func(b *testing.B, s *side) {
		must(b, s.b.LoadModule(1, engine.Module{Handle: 1, Entry: "empty", PTX: []byte("ptx"), Args: 1}))
		g := engine.Grid{X: 1, Y: 1, Z: 1, BlockX: 1, BlockY: 1, BlockZ: 1}
		i := 0
		for b.Loop() {
			if err := s.b.LaunchGrid(1, g, nil); err != nil {
				b.Fatal(err)
			}
			if i++; i%1000 == 0 {
				must(b, s.b.Sync())
			}
		}
		must(b, s.b.Sync())
	})
}

// BenchmarkWrite4K: 4 KiB Writes into the aperture (served from gmigd's
// own mapping while nothing is pending on the device) and into
// device-local memory (always a round trip to the worker).
func BenchmarkWrite4K(b *testing.B) {
	backEnds(b, false, func(b *testing.B, s *side) {
		for _, c := range []struct {
			name string
			base uint64
		}{{"aperture", 0}, {"local", testWindow}} {
			b.Run(c.name, func(b *testing.B) {
				data := make([]byte, 4096)
				b.SetBytes(int64(len(data)))
				i := uint64(0)
				for b.Loop() {
					must(b, s.b.Write(s.xs(c.base+(i%32)*4096, 4096), data))
					i++
				}
			})
		}
	})
}

// BenchmarkEngineLaunch: what the engine asks of the back end per
// LAUNCH_GRID: the ring fetch (a 64-byte Read of the aperture), the
// parameter buffer's Read, the launch; a Sync every 1000.
func BenchmarkEngineLaunch(b *testing.B) {
	backEnds(b, true, func(b *testing.B, s *side) {
		must(b, s.b.LoadModule(1, engine.Module{Handle: 1, Entry: "empty", PTX: []byte("ptx"), Args: 1}))
		g := engine.Grid{X: 1, Y: 1, Z: 1, BlockX: 1, BlockY: 1, BlockZ: 1}
		ring, params := make([]byte, 64), make([]byte, 28)
		i := uint64(0)
		for b.Loop() {
			must(b, s.b.Read(ring, s.xs((i%1024)*64, 64)))
			must(b, s.b.Read(params, s.xs(512<<10, 28)))
			if err := s.b.LaunchGrid(1, g, nil); err != nil {
				b.Fatal(err)
			}
			if i++; i%1000 == 0 {
				must(b, s.b.Sync())
			}
		}
		must(b, s.b.Sync())
	})
}

// BenchmarkStopPhaseLocal: a migration's stop-phase traffic of
// device-local memory, n changed pages (every other page: runs of one, as
// scattered dirty pages are) — the local tracker's Read (the source) and
// LoadLocal of the same pages (the destination) — in this process, through
// a worker with the payloads on the socket (the path before the bulk
// buffer: bulkMin off) and through a worker with the bulk buffer, side by
// side (docs/nvidia.md "Isolation" has the ratios).
func BenchmarkStopPhaseLocal(b *testing.B) {
	modes := []struct {
		name   string
		worker bool
		min    int
	}{{"in-process", false, bulkMin}, {"worker-socket", true, math.MaxInt}, {"worker-bulk", true, bulkMin}}
	for _, n := range []int{4096, 40960} {
		local := uint64(2*n) * pageSize
		pages := make([]int, n)
		for i := range pages {
			pages[i] = 2 * i
		}
		for _, m := range modes {
			b.Run(fmt.Sprintf("pages=%d/%s", n, m.name), func(b *testing.B) {
				withBulk(b, m.min, BulkSize/2)
				p := newPoolSized(b, testWindow+local+(2<<20))
				var s *side
				if m.worker {
					s = startWorkerLocal(b, p, false, zerolog.Nop(), local)
				} else {
					s = startInProcessLocal(b, p, false, local)
				}
				tr, err := s.b.NewLocalTracker()
				must(b, err)
				defer tr.Close()
				buf, mem := make([]byte, n*pageSize), make([]byte, local)
				for i := range mem {
					mem[i] = byte(i / pageSize)
				}
				b.Run("read", func(b *testing.B) {
					b.SetBytes(int64(n * pageSize))
					for b.Loop() {
						must(b, tr.Read(pages, buf))
					}
				})
				b.Run("load", func(b *testing.B) {
					b.SetBytes(int64(n * pageSize))
					for b.Loop() {
						must(b, s.b.LoadLocal(pages, mem))
					}
				})
				must(b, tr.Read(pages, buf))
				for i, p := range pages {
					if buf[i*pageSize] != byte(p) {
						b.Fatalf("page %d read back as %#x after LoadLocal", p, buf[i*pageSize])
					}
				}
			})
		}
	}
}
