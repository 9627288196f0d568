package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/orchestrator"
)

// inProc is two gmigd hosts in this process, with migration listeners on
// loopback TCP, sharing a registry of simulated VMs: the in-process mode of
// gmigd demo and gmigd bench. Migrations between them go through the same
// orchestrator as `gmigd migrate` (hostd.MigrateVM).
type inProc struct {
	sims   *sim.Registry
	hosts  [2]*inProcHost
	cancel context.CancelFunc
	wg     sync.WaitGroup // the migration listeners' goroutines
}

// inProcHost is one of the two.
type inProcHost struct {
	*hostd.Host
	name string
	dir  string
	addr string
}

// newInProc starts two hosts with pools of poolSize bytes. onBeat, if set,
// sees every guest heartbeat on both.
func newInProc(poolSize uint64, log zerolog.Logger, onBeat func(host, vgpu string, v uint64, at time.Time)) (*inProc, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProc{sims: &sim.Registry{}, cancel: cancel}
	for i, name := range []string{"a", "b"} {
		dir, err := os.MkdirTemp("", "gmig-"+name+"-")
		if err != nil {
			p.close()
			return nil, err
		}
		cfg := hostd.Config{PoolSize: poolSize, RunDir: dir, Log: log.With().Str("host", name).Logger(), Sims: p.sims}
		if onBeat != nil {
			cfg.OnHeartbeat = func(vgpu string, v uint64, at time.Time) { onBeat(name, vgpu, v, at) }
		}
		h, err := hostd.New(cfg)
		if err != nil {
			os.RemoveAll(dir)
			p.close()
			return nil, err
		}
		l, err := h.ListenMigrations("127.0.0.1:0")
		if err != nil {
			h.Close()
			os.RemoveAll(dir)
			p.close()
			return nil, err
		}
		p.hosts[i] = &inProcHost{Host: h, name: name, dir: dir, addr: l.Addr().String()}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = h.ServeMigrations(ctx, l, nil)
		}()
	}
	return p, nil
}

// close stops both hosts.
func (p *inProc) close() {
	p.cancel()
	p.wg.Wait()
	for _, h := range p.hosts {
		if h != nil {
			h.Close()
			os.RemoveAll(h.dir)
		}
	}
}

// startVM creates vGPU name of mem bytes on host h, fills a fraction fill
// of its pages with seeded data (a guest's textures and buffers), attaches
// the simulated guest with the seeded workload, and registers it as VM
// name (held: see hostd.Host.AddSimVM).
func (p *inProc) startVM(h *inProcHost, name string, mem uint64, fill float64, seed int64, wcfg guest.WorkloadConfig, held func(*sim.VM) (<-chan struct{}, error)) (*sim.VM, hostd.Info, error) {
	info, err := h.Create(vgpu.Config{Name: name, MemSize: mem})
	if err != nil {
		return nil, info, err
	}
	v, err := h.VGPU(name)
	if err != nil {
		return nil, info, err
	}
	prefill(v.Memory(), fill, seed)
	vm, err := sim.StartVM(info.Socket, seed, wcfg, sim.Options{MSI: true})
	if err != nil {
		return nil, info, err
	}
	var hc <-chan struct{}
	if held != nil {
		if hc, err = held(vm); err != nil {
			vm.Close()
			return nil, info, err
		}
	}
	if err := h.AddSimVM(name, name, vm, hc); err != nil {
		vm.Close()
		return nil, info, err
	}
	p.sims.Put(name, vm)
	return vm, info, nil
}

// migrate moves VM name from host from to the other host.
func (p *inProc) migrate(ctx context.Context, from int, name string, opts hostd.MigrateOptions) (orchestrator.Report, error) {
	return p.hosts[from].MigrateVM(ctx, name, p.hosts[1-from].addr, opts)
}

// prefill gives a fraction fill of mem's pages seeded contents, the rest
// zero, the same for a seed every time.
func prefill(mem []byte, fill float64, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x66696c6c)) // "fill"
	for off := 0; off+dirty.PageSize <= len(mem); off += dirty.PageSize {
		if rng.Float64() >= fill {
			continue
		}
		for i := off; i < off+dirty.PageSize; i += 8 {
			binary.LittleEndian.PutUint64(mem[i:], rng.Uint64())
		}
	}
}

// referenceDigest runs the workload on a vGPU that never moves: the digest
// a migrated run must end with.
func referenceDigest(ctx context.Context, mem uint64, fill float64, seed int64, wcfg guest.WorkloadConfig, steps int, log zerolog.Logger) ([32]byte, error) {
	p, err := newInProc(mem+(16<<20), log, nil)
	if err != nil {
		return [32]byte{}, err
	}
	defer p.close()
	vm, _, err := p.startVM(p.hosts[0], "reference", mem, fill, seed, wcfg, nil)
	if err != nil {
		return [32]byte{}, err
	}
	defer vm.Close()
	if err := vm.Run(ctx, steps); err != nil {
		return [32]byte{}, fmt.Errorf("reference run: %w", err)
	}
	return vm.Digest()
}
