package precopy

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/migtest"
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
	pools := [2]*pool.Pool{migtest.NewPool(t, 4*mem), migtest.NewPool(t, 4*mem)}
	cur := migtest.ServeNew(t, pools[0], "k0", mem)
	m := migtest.Attach(t, cur, 9, sim.Options{MSI: true})
	d := m.Driver()
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
	before := cur.V.APILog().Compacted()

	for i := range 2 {
		var rep Report
		cur, rep, _ = migrateVM(ctx, t, m, cur, pools[(i+1)%2], hop{name: "k" + string(rune('1'+i)), opts: Options{Log: migtest.Log}})
		a := rep.APILog
		if a.CompactedEntries >= int(a.RawEntries) || a.CompactedBytes != a.CompactedEntries*apilog.EntrySize {
			t.Errorf("hop %d: API log %+v", i+1, a)
		}
		t.Logf("hop %d: API log %d entries (%d B) raw, %d (%d B) compacted", i+1, a.RawEntries, a.RawBytes, a.CompactedEntries, a.CompactedBytes)
	}
	// The simulator re-programs config space when it re-attaches (a real
	// destination QEMU does not), which reorders the config writes: compare
	// those as a set.
	after := cur.V.APILog().Compacted()
	if !slices.Equal(deviceEntries(after), deviceEntries(before)) || !sameSet(cur.V.ConfigWrites(), configWrites(before)) {
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

// deviceEntries and configWrites split a compacted log as SaveMigrated
// does: what the device replays, and the guest's config writes.
func deviceEntries(es []apilog.Entry) []apilog.Entry {
	return slices.DeleteFunc(slices.Clone(es), func(e apilog.Entry) bool { return e.Kind == apilog.ConfigWrite })
}

func configWrites(es []apilog.Entry) []apilog.Entry {
	return slices.DeleteFunc(slices.Clone(es), func(e apilog.Entry) bool { return e.Kind != apilog.ConfigWrite })
}

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
