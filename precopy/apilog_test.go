package precopy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
)

// TestAPILogAcrossHops loads and unloads kernel objects from a guest
// driver, migrates its vGPU there and back, and launches: a kernel loaded
// before the migrations runs after them, one unloaded before does not, the
// report shows the log compacted, and the API log the vGPU ends up with is
// the one it started with (so it can migrate again and again).
func TestAPILogAcrossHops(t *testing.T) {
	const mem = 4 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pools := [2]*pool2{{newPool(t, 4*mem)}, {newPool(t, 4*mem)}}
	cur := serveNew(t, pools[0].p, "k0", mem)
	bus, err := sim.Attach(cur.path, sim.Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	d, err := guest.Open(bus, guest.Options{Seed: 9, UseIRQ: true})
	if err != nil {
		t.Fatal(err)
	}
	m := &vm{t: t, bus: bus, d: d, gate: newPauser(func() uint64 { return 0 })}
	t.Cleanup(func() { m.bus.Close() })
	const live, gone = 0x40, 0x41
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.LoadKernel(live, abi.KernelSaxpy))
	must(d.LoadKernel(gone, abi.KernelSaxpy))
	for h := uint32(0x50); h < 0x90; h++ {
		must(d.LoadKernel(h, abi.KernelRender))
		must(d.UnloadKernel(h))
	}
	must(d.UnloadKernel(gone))
	must(d.Sync(ctx))
	before := cur.v.APILog().Compacted()

	for i := range 2 {
		var rep Report
		cur, rep = migrateVM(ctx, t, m, cur, pools[(i+1)%2].p, "k"+string(rune('1'+i)), Options{Log: testLog}, 0)
		a := rep.APILog
		if a.CompactedEntries >= int(a.RawEntries) || a.CompactedBytes != a.CompactedEntries*apilog.EntrySize {
			t.Errorf("hop %d: API log %+v", i+1, a)
		}
		t.Logf("hop %d: API log %d entries (%d B) raw, %d (%d B) compacted", i+1, a.RawEntries, a.RawBytes, a.CompactedEntries, a.CompactedBytes)
	}
	// The simulator re-programs config space when it re-attaches (a real
	// destination QEMU does not), which reorders the config writes: compare
	// those as a set.
	after := cur.v.APILog().Compacted()
	ad, ac := splitLog(after)
	bd, bc := splitLog(before)
	if !equalEntries(ad, bd) || !sameSet(ac, bc) {
		t.Fatalf("API log after two hops %+v, before %+v", after, before)
	}

	x, err := d.Alloc(abi.PageSize)
	must(err)
	y, err := d.Alloc(abi.PageSize)
	must(err)
	must(d.Saxpy(live, 16, 2, x, y))
	if err := d.Sync(ctx); err != nil {
		t.Fatalf("launching a kernel loaded before the migrations: %v", err)
	}
	must(d.Saxpy(gone, 16, 2, x, y))
	var de *guest.DeviceError
	if err := d.Sync(ctx); !errors.As(err, &de) || de.Status&abi.ErrKernel == 0 {
		t.Fatalf("launching a kernel unloaded before the migrations: %v", err)
	}
}

// pool2 names a test pool for readability of the hop loop.
type pool2 struct{ p *pool.Pool }

func sameSet(a, b []apilog.Entry) bool {
	m := map[apilog.Entry]int{}
	for _, e := range a {
		m[e]++
	}
	for _, e := range b {
		m[e]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

func equalEntries(a, b []apilog.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
