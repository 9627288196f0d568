package orchestrator

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/precopy"
)

// dirtyingNet is a Transport whose source data connections run dirty
// before each write: a guest that rewrites its vGPU's memory as fast as
// the stream goes (on the stream's goroutine, between the tracker's scans
// and copies, as the race detector wants it).
type dirtyingNet struct {
	Transport
	dirty func()
}

func (n dirtyingNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := n.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &dirtyingConn{Conn: c, dirty: n.dirty}, nil
}

type dirtyingConn struct {
	net.Conn
	dirty  func()
	writes int
	data   bool
}

func (c *dirtyingConn) Write(p []byte) (int, error) {
	if c.writes == 0 {
		c.data = isMsg(p, "kind", kindData)
	}
	c.writes++
	if c.data {
		c.dirty()
	}
	return c.Conn.Write(p)
}

func (c *dirtyingConn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

// A guest that dirties every page faster than the link drains them keeps
// the estimate over a tiny bound: the migration rolls back before the
// pause, saying so.
func TestMaxDowntimeRollsBackABusyGuest(t *testing.T) {
	e := newEnv(t, Timeouts{})
	e.start()
	rng := rand.New(rand.NewPCG(1, 2))
	mem := e.dev.V.Memory()
	s := e.source(Timeouts{})
	s.Transport = dirtyingNet{Transport: e.net, dirty: func() {
		for off := 0; off < len(mem); off += 4096 {
			mem[off] = byte(rng.Uint32())
		}
	}}
	// 20 MB/s: a 1 MiB vGPU all dirty takes ~50 ms, over the bound.
	s.Control = NewControl(20e6)
	s.MaxDowntime = 10 * time.Millisecond
	rep, err := e.migrate(t, s)
	if !errors.Is(err, ErrRolledBack) || !errors.Is(err, ErrDowntime) {
		t.Fatalf("Migrate: %v, want a rollback for the downtime bound", err)
	}
	if !strings.Contains(err.Error(), "exceeds --max-downtime 10 ms") {
		t.Errorf("the error does not give the bound: %v", err)
	}
	t.Log(err)
	if e.vm.n("Migrate", false) != 0 {
		t.Error("the VMM's migration started: the VM could have paused over the bound")
	}
	if e.vm.State() != vmRunning {
		t.Errorf("source VM %s, want running", e.vm.State())
	}
	est, ok := s.Control.Estimate()
	if !ok || est.Total <= s.MaxDowntime || est.Rounds != maxConvergeRounds || rep.Estimate == nil {
		t.Errorf("estimate %+v (ok %v), report's %v", est, ok, rep.Estimate)
	}
	if a := e.waitArrival(t); a.Err == nil {
		t.Error("the destination kept the migration")
	}
	if parts := e.dstPool.Partitions(); len(parts) != 0 {
		t.Errorf("the destination's pool still holds %v", parts)
	}
}

// A quiet guest fits the bound after one round and migrates.
func TestMaxDowntimeMigratesAQuietGuest(t *testing.T) {
	e := newEnv(t, Timeouts{})
	e.start()
	s := e.source(Timeouts{})
	s.MaxDowntime = 2 * time.Second
	rep, err := e.migrate(t, s)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if rep.Estimate == nil || rep.Estimate.Rounds != 1 || rep.Estimate.Total > s.MaxDowntime || rep.Estimate.Link <= 0 {
		t.Errorf("estimate %+v", rep.Estimate)
	}
	t.Log(rep.Estimate)
	e.waitArrival(t)
	checkLive(t, e, liveDest)
}

func TestEstimateTerms(t *testing.T) {
	r := precopy.RoundResult{Dirty: 100, Interval: 100 * time.Millisecond, Scan: 2 * time.Millisecond}
	e := estimate(r, 100*time.Millisecond, 1000, 4096*1000, 5*time.Millisecond)
	// 1000 pages/s over 200 ms: 200 pages; 200 × 4 KiB at 1000 pages/s: 200 ms.
	if e.DirtyPages != 200 || e.Transfer != 200*time.Millisecond || e.Total != 207*time.Millisecond {
		t.Errorf("%+v", e)
	}
	if e := estimate(r, time.Hour, 1000, 4096*1000, 0); e.DirtyPages != 1000 {
		t.Errorf("dirty pages %d, want at most every page (1000)", e.DirtyPages)
	}
}
