// Package inproc is two gmigd hosts in one process (hostd.Host each, with
// a migration listener on loopback TCP) sharing a registry of simulated
// VMs, and what runs on them: vGPUs with a seeded prefill, the built-in
// guest simulator's workload, migrations through the orchestrator exactly
// as `gmigd migrate` does them (hostd.MigrateVM), and the digest of a run
// that never moved. `gmigd demo -sim`, gmig-bench and gmig-nvbench share
// it.
package inproc

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// Pair is two gmigd hosts in this process, with migration listeners on
// loopback TCP, sharing a registry of simulated VMs. Migrations between
// them go through the same orchestrator as `gmigd migrate`
// (hostd.MigrateVM).
type Pair struct {
	Sims   *sim.Registry
	Hosts  [2]*Host
	cancel context.CancelFunc
	wg     sync.WaitGroup // the migration listeners' goroutines
}

// Host is one of the two.
type Host struct {
	*hostd.Host
	Name string // "a" or "b"
	Dir  string // its run directory (a temporary one, removed by Close)
	Addr string // its migration listener
}

// New starts two hosts with pools of poolSize bytes. onBeat, if set,
// sees every guest heartbeat on both. Their cuda vGPUs run on CUDA's
// first GPU, both.
func New(poolSize uint64, log zerolog.Logger, onBeat func(host, vgpu string, v uint64, at time.Time)) (*Pair, error) {
	return NewOnGPUs(poolSize, [2]string{}, log, onBeat)
}

// NewOnGPUs is New with each host's GPU chosen (hostd.Config.GPU: an
// index, a UUID, "" for CUDA's first): the source and destination of a
// migration on different GPUs of this machine. In-process hosts take no
// GPU lock, so both may share one.
func NewOnGPUs(poolSize uint64, gpus [2]string, log zerolog.Logger, onBeat func(host, vgpu string, v uint64, at time.Time)) (*Pair, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pair{Sims: &sim.Registry{}, cancel: cancel}
	for i, name := range []string{"a", "b"} {
		dir, err := os.MkdirTemp("", "gmig-"+name+"-")
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("inproc: host %s: %w", name, err)
		}
		cfg := hostd.Config{PoolSize: poolSize, RunDir: dir, Log: log.With().Str("host", name).Logger(), Sims: p.Sims, GPU: gpus[i]}
		if onBeat != nil {
			cfg.OnHeartbeat = func(vgpu string, v uint64, at time.Time) { onBeat(name, vgpu, v, at) }
		}
		h, err := hostd.New(cfg)
		if err != nil {
			os.RemoveAll(dir)
			p.Close()
			return nil, fmt.Errorf("inproc: host %s: %w", name, err)
		}
		l, err := h.ListenMigrations("127.0.0.1:0")
		if err != nil {
			h.Close()
			os.RemoveAll(dir)
			p.Close()
			return nil, fmt.Errorf("inproc: host %s: %w", name, err)
		}
		p.Hosts[i] = &Host{Host: h, Name: name, Dir: dir, Addr: l.Addr().String()}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = h.ServeMigrations(ctx, l, nil)
		}()
	}
	return p, nil
}

// Close stops both hosts and removes their run directories.
func (p *Pair) Close() {
	p.cancel()
	p.wg.Wait()
	for _, h := range p.Hosts {
		if h != nil {
			h.Close()
			os.RemoveAll(h.Dir)
		}
	}
}

// StartVM creates vGPU cfg on host h, fills a fraction fill of its pages
// with seeded data (a guest's textures and buffers), attaches the
// simulated guest with the seeded workload, and registers it as VM
// cfg.Name (held: see hostd.Host.AddSimVM).
func (p *Pair) StartVM(h *Host, cfg vgpu.Config, fill float64, seed int64, wcfg guest.WorkloadConfig, held func(*sim.VM) (<-chan struct{}, error)) (*sim.VM, hostd.Info, error) {
	name := cfg.Name
	info, err := h.Create(cfg)
	if err != nil {
		return nil, info, err
	}
	v, err := h.VGPU(name)
	if err != nil {
		return nil, info, err
	}
	Prefill(v.Memory(), fill, seed)
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
	p.Sims.Put(name, vm)
	return vm, info, nil
}

// Migrate moves VM name from host from (0 or 1) to the other host.
func (p *Pair) Migrate(ctx context.Context, from int, name string, opts hostd.MigrateOptions) (orchestrator.Report, error) {
	return p.Hosts[from].MigrateVM(ctx, name, p.Hosts[1-from].Addr, opts)
}

// Prefill gives a fraction fill of mem's pages seeded contents, the rest
// zero: each page's lot and bytes follow from seed and its index alone, so
// the result is the same every time, and the pages are filled on every
// CPU (a 16 GiB vGPU in about a second).
func Prefill(mem []byte, fill float64, seed int64) {
	pages := len(mem) / dirty.PageSize
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for pg := w; pg < pages; pg += workers {
				rng := rand.New(rand.NewPCG(uint64(seed), 0x66696c6c<<32|uint64(pg))) // "fill"
				if rng.Float64() >= fill {
					continue
				}
				b := mem[pg*dirty.PageSize : (pg+1)*dirty.PageSize]
				for i := 0; i < len(b); i += 8 {
					binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
				}
			}
		})
	}
	wg.Wait()
}

// ReferenceDigest runs the workload on a vGPU that never moves: the digest
// a migrated run must end with.
func ReferenceDigest(ctx context.Context, mem uint64, fill float64, seed int64, wcfg guest.WorkloadConfig, steps int, log zerolog.Logger) ([32]byte, error) {
	p, err := New(mem+(16<<20), log, nil)
	if err != nil {
		return [32]byte{}, err
	}
	defer p.Close()
	vm, _, err := p.StartVM(p.Hosts[0], vgpu.Config{Name: "reference", MemSize: mem}, fill, seed, wcfg, nil)
	if err != nil {
		return [32]byte{}, err
	}
	defer vm.Close()
	if err := vm.Run(ctx, steps); err != nil {
		return [32]byte{}, fmt.Errorf("inproc: reference run: %w", err)
	}
	return vm.Digest()
}
