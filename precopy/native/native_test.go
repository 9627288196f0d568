package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vfio"
	"github.com/gmig-dev/gmig/vgpu"
)

// nativeServed is a vGPU served as a Device on a vfio-user socket, as a
// gmigd serves it to a QEMU that migrates vfio-user devices itself.
type nativeServed struct {
	*migtest.Served
	n *Device
}

// serveNative serves v through New(v, opts) until the end of the test (or
// Close), then closes the Device and so v.
func serveNative(t *testing.T, v *vgpu.VGPU, opts precopy.Options) *nativeServed {
	t.Helper()
	n, err := New(v, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &nativeServed{migtest.ServeDevice(t, v, n), n}
}

// dial connects a client, as QEMU would.
func (s *nativeServed) dial(t *testing.T) *vfio.Client {
	t.Helper()
	c, err := vfio.Dial(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func wantMigState(t *testing.T, c *vfio.Client, want vfio.MigState) {
	t.Helper()
	got, err := c.MigState()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("migration state %s, want %s", got, want)
	}
}

func setMigState(t *testing.T, c *vfio.Client, s vfio.MigState) {
	t.Helper()
	if err := c.SetMigState(s); err != nil {
		t.Fatalf("to %s: %v", s, err)
	}
}

// readMigData reads migration data until a short read, as
// vfio.Client.SaveDevice does; chunks > 0 stops after that many reads.
func readMigData(t *testing.T, c *vfio.Client, chunks int) []byte {
	t.Helper()
	var b []byte
	for i := 0; chunks == 0 || i < chunks; i++ {
		data, err := c.MigDataRead(c.MaxDataXfer())
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, data...)
		if len(data) < int(c.MaxDataXfer()) {
			break
		}
	}
	return b
}

// maxBlob bounds the blob sections these tests read: precopy's own limit
// on a DeviceState.
const maxBlob = 16 << 20

// checkStream checks that b is one whole migration stream
// (docs/migration-stream.md) for mem bytes, ending exactly at End.
func checkStream(t *testing.T, b []byte, mem uint64) {
	t.Helper()
	r, err := stream.NewReader(bytes.NewReader(b), stream.Limits{MaxBlob: maxBlob})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, mem)
	for {
		_, err := r.Next(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("migration data is not a stream: %v", err)
		}
	}
	if err := r.CheckEOF(); err != nil {
		t.Fatal(err)
	}
}

// streamPages counts the page records in b, the beginning of a stream.
func streamPages(t *testing.T, b []byte, mem uint64) int {
	t.Helper()
	r, err := stream.NewReader(bytes.NewReader(b), stream.Limits{MaxBlob: maxBlob})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, mem)
	n := 0
	for {
		sec, err := r.Next(buf)
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return n
		case err != nil:
			t.Fatalf("migration data is not a stream: %v", err)
		case sec.Type == stream.PageBatch:
			n += sec.Pages
		}
	}
}

// checkSameDevice checks that dst (stopped) holds src's (stopped) memory,
// state and API log, and shows the guest the same GTT through its client.
func checkSameDevice(t *testing.T, src, dst *vgpu.VGPU, sc, dc *vfio.Client) {
	t.Helper()
	if src.Partition().Offset == dst.Partition().Offset {
		t.Fatalf("destination at the source's pool offset %#x", src.Partition().Offset)
	}
	if !bytes.Equal(src.Memory(), dst.Memory()) {
		t.Fatal("destination memory differs from the source's")
	}
	want, err := src.Save()
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.Save()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("destination state differs:\n got %+v\nwant %+v", got.Engine, want.Engine)
	}
	if !reflect.DeepEqual(dst.APILog().Compacted(), src.APILog().Compacted()) {
		t.Fatalf("destination API log %+v, source %+v", dst.APILog().Compacted(), src.APILog().Compacted())
	}
	gs, gd := make([]byte, 8*64), make([]byte, 8*64)
	if err := sc.ReadRegion(abi.BARRegs, abi.GTTOffset, gs); err != nil {
		t.Fatal(err)
	}
	if err := dc.ReadRegion(abi.BARRegs, abi.GTTOffset, gd); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gs, gd) || bytes.Equal(gs, make([]byte, len(gs))) {
		t.Fatalf("guest GTT view differs or is empty:\n src % x\n dst % x", gs[:16], gd[:16])
	}
}

// nativePair is a source vGPU with content and an empty destination vGPU
// in another pool at another offset, both served as Devices.
type nativePair struct {
	src    *migtest.Dev
	sn, dn *nativeServed
	dv     *vgpu.VGPU
}

func newNativePair(t *testing.T, mem uint64, opts precopy.Options) *nativePair {
	t.Helper()
	pa, pb := migtest.NewPool(t, 4*mem), migtest.NewPool(t, 4*mem)
	_ = migtest.NewVGPU(t, pb, "filler", mem) // the destination lands at another offset
	src := migtest.NewDev(t, pa, "src", mem, 1)
	src.FillMemory(2)
	dv := migtest.NewVGPU(t, pb, "dst", mem)
	return &nativePair{src: src, sn: serveNative(t, src.V, opts), dn: serveNative(t, dv, precopy.Options{Log: migtest.Log}), dv: dv}
}

// TestNativeSaveLoad migrates a vGPU with content (GTT, memory, kernels
// loaded and unloaded through the ring, a fence) with each strategy the
// way a VMM would through vfio-user alone: SaveDevice on the source's
// client, LoadDevice on the destination's, then RUNNING. The data is one
// migration stream; the destination, at another pool offset, has the
// source's memory, state, API log and guest GTT view, and runs a kernel
// loaded before the migration.
func TestNativeSaveLoad(t *testing.T) {
	for _, strat := range precopy.Strategies {
		t.Run(string(strat), func(t *testing.T) {
			const mem = 2 << 20
			p := newNativePair(t, mem, precopy.Options{Strategy: strat, Workers: 2, Log: migtest.Log})
			sc, dc := p.sn.dial(t), p.dn.dial(t)
			if flags, err := sc.MigrationFlags(); err != nil || flags != vfio.MigrationStopCopy|vfio.MigrationPreCopy {
				t.Fatalf("migration flags %#x, %v", flags, err)
			}
			if size, err := sc.MigDataSize(); err != nil || size < mem {
				t.Fatalf("MIG_DATA_SIZE before a save %d (%v), want at least the memory, %d", size, err, mem)
			}
			var buf bytes.Buffer
			if err := sc.SaveDevice(&buf); err != nil {
				t.Fatal(err)
			}
			wantMigState(t, sc, vfio.MigStateStop)
			checkStream(t, buf.Bytes(), mem)
			if err := dc.LoadDevice(bytes.NewReader(buf.Bytes())); err != nil {
				t.Fatal(err)
			}
			wantMigState(t, dc, vfio.MigStateStop)
			checkSameDevice(t, p.src.V, p.dv, sc, dc)
			setMigState(t, dc, vfio.MigStateRunning)
			p.src.CheckRunsAfter(p.dv)

			p.sn.Close()
			p.dn.Close()
			if rs, rd := p.sn.n.Report(), p.dn.n.Report(); rs.Strategy != strat || rs.Stop.Total <= 0 ||
				rd.Strategy != strat || rd.Stop.Restore <= 0 || rd.Stop.DirtyPages != rs.Stop.DirtyPages {
				t.Fatalf("reports:\nsource\n%s\ndestination\n%s", rs, rd)
			}
		})
	}
}

// TestNativePrecopy drives the FSM by hand: PRE_COPY reads until a short
// read (the whole live pass), then the guest CPU and the engine change the
// source's memory, then STOP_COPY reads to the end. The changes arrive.
// Without PRE_COPY (RUNNING -> STOP_COPY, through STOP) the stop phase
// alone carries everything.
func TestNativePrecopy(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(fmt.Sprintf("precopy=%v", live), func(t *testing.T) {
			const mem = 2 << 20
			p := newNativePair(t, mem, precopy.Options{Workers: 2, Log: migtest.Log})
			sc, dc := p.sn.dial(t), p.dn.dial(t)
			var data []byte
			if live {
				setMigState(t, sc, vfio.MigStatePreCopy)
				data = readMigData(t, sc, 0)
				if n := streamPages(t, data, mem); n != mem/abi.PageSize {
					t.Fatalf("PRE_COPY gave %d pages, want the whole live pass (%d)", n, mem/abi.PageSize)
				}
				if size, err := sc.MigDataSize(); err != nil || size >= mem {
					t.Fatalf("MIG_DATA_SIZE after the live pass %d (%v), want less than the memory", size, err)
				}
				if more := readMigData(t, sc, 0); len(more) != 0 {
					t.Fatalf("PRE_COPY gave %d more bytes after its short read", len(more))
				}
			}
			p.src.RunWhileLive(3)
			setMigState(t, sc, vfio.MigStateStopCopy)
			data = append(data, readMigData(t, sc, 0)...)
			if more := readMigData(t, sc, 0); len(more) != 0 {
				t.Fatalf("STOP_COPY gave %d bytes after its end", len(more))
			}
			setMigState(t, sc, vfio.MigStateStop)
			checkStream(t, data, mem)

			if err := dc.LoadDevice(bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			checkSameDevice(t, p.src.V, p.dv, sc, dc)
			dst := p.src.On(p.dv)
			if pg := dst.Page(migtest.GFillLive); pg[0] != 0x0d || pg[3] != 0xfe {
				t.Fatalf("the engine's FILL after PRE_COPY did not arrive: % x", pg[:8])
			}
			if !bytes.Equal(dst.Page(migtest.GCPUWrite), p.src.Page(migtest.GCPUWrite)) || !bytes.Equal(dst.Page(migtest.GZeroed), make([]byte, abi.PageSize)) {
				t.Fatal("the guest CPU's writes after PRE_COPY did not arrive")
			}
			setMigState(t, dc, vfio.MigStateRunning)
			p.src.CheckRunsAfter(p.dv)
		})
	}
}

// corruptions are destination-side failures: each stream is refused by
// RESUMING -> STOP (or an earlier MIG_DATA_WRITE), wrapping want.
var corruptions = []struct {
	name string
	make func(good []byte) []byte
	want error
}{
	{"page corrupted", func(g []byte) []byte { return migtest.Corrupt(g, len(g)/3) }, stream.ErrPageHash},
	{"truncated", func(g []byte) []byte { return g[:len(g)/2] }, io.ErrUnexpectedEOF},
	{"trailing data", func(g []byte) []byte { return append(append([]byte(nil), g...), 1, 2, 3) }, stream.ErrTrailingData},
	{"no stream", func([]byte) []byte { return []byte("not a migration stream") }, stream.ErrMagic},
	{"empty", func([]byte) []byte { return nil }, io.ErrUnexpectedEOF},
}

// TestNativeCorruptStream feeds the destination broken streams: RESUMING
// -> STOP fails with the reason, the FSM stays at RESUMING, and after
// DEVICE_RESET the destination runs and then accepts a good stream.
func TestNativeCorruptStream(t *testing.T) {
	const mem = 1 << 20
	p := newNativePair(t, mem, precopy.Options{Log: migtest.Log})
	sc, dc := p.sn.dial(t), p.dn.dial(t)
	var good bytes.Buffer
	if err := sc.SaveDevice(&good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range corruptions {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.make(good.Bytes())
			if err := dc.LoadDevice(bytes.NewReader(bad)); err == nil {
				t.Fatal("a broken stream was loaded")
			}
			if err := dc.SetMigState(vfio.MigStateStop); err == nil {
				t.Fatal("RESUMING -> STOP accepted a broken stream on a second try")
			}
			wantMigState(t, dc, vfio.MigStateResuming)
			if err := dc.Reset(); err != nil {
				t.Fatal(err)
			}
			wantMigState(t, dc, vfio.MigStateRunning)
			d := migtest.Program(t, p.dv, 7)
			d.Submit(migtest.Fill(3, 0x11223344))
			if pg := d.Page(3); pg[0] != 0x44 || pg[abi.PageSize-1] != 0x11 {
				t.Fatalf("the destination does not run after the reset: % x", pg[:8])
			}

			// The same stream through the Migrator alone: the reason.
			n, err := New(migtest.NewVGPU(t, migtest.NewPool(t, 2*mem), "direct", mem), precopy.Options{Log: migtest.Log})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			for _, to := range []vfio.MigState{vfio.MigStateStop, vfio.MigStateResuming} {
				from := vfio.MigStateRunning
				if to == vfio.MigStateResuming {
					from = vfio.MigStateStop
				}
				if err := n.SetMigState(from, to); err != nil {
					t.Fatal(err)
				}
			}
			err = n.MigDataWrite(bad)
			if err == nil {
				err = n.SetMigState(vfio.MigStateResuming, vfio.MigStateStop)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("refused with %v, want %v", err, tc.want)
			}
			if err2 := n.SetMigState(vfio.MigStateResuming, vfio.MigStateStop); !errors.Is(err2, tc.want) {
				t.Fatalf("RESUMING -> STOP after the failure: %v, want %v", err2, tc.want)
			}
		})
	}
	if err := dc.LoadDevice(bytes.NewReader(good.Bytes())); err != nil {
		t.Fatalf("a good stream after the resets: %v", err)
	}
	checkSameDevice(t, p.src.V, p.dv, sc, dc)
	setMigState(t, dc, vfio.MigStateRunning)
	p.src.CheckRunsAfter(p.dv)
}

// TestNativeAbortedSave cuts saves short in each way a VMM may: STOP_COPY
// left before its end, then STOP -> RUNNING; PRE_COPY left for RUNNING;
// DEVICE_RESET in PRE_COPY. Each time the source's memory and state are
// unchanged and its engine runs again (in STOP it stays quiesced, and a
// doorbell rung then runs on RUNNING); a whole save afterwards migrates it.
func TestNativeAbortedSave(t *testing.T) {
	const mem = 2 << 20
	p := newNativePair(t, mem, precopy.Options{Workers: 2, Log: migtest.Log})
	sc, dc := p.sn.dial(t), p.dn.dial(t)
	src := p.src
	// snapshot returns the source's memory and state; running: quiesce
	// for the state's sake and resume after.
	snapshot := func(running bool) ([]byte, vgpu.State) {
		t.Helper()
		if running {
			src.V.Quiesce()
			defer src.V.Resume()
		}
		st, err := src.V.Save()
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), src.V.Memory()...), st
	}
	unchanged := func(what string, mem0 []byte, st0 vgpu.State, running bool) {
		t.Helper()
		mem1, st1 := snapshot(running)
		if !bytes.Equal(mem0, mem1) || !reflect.DeepEqual(st0, st1) {
			t.Fatalf("%s changed the source", what)
		}
	}
	running := func(what string) {
		t.Helper()
		if _, err := src.V.Save(); !errors.Is(err, engine.ErrNotQuiesced) {
			t.Fatalf("%s: engine not running (Save: %v)", what, err)
		}
	}

	mem0, st0 := snapshot(true)
	setMigState(t, sc, vfio.MigStatePreCopy)
	readMigData(t, sc, 1)
	setMigState(t, sc, vfio.MigStateStopCopy)
	readMigData(t, sc, 1)
	setMigState(t, sc, vfio.MigStateStop)
	unchanged("STOP_COPY cut short", mem0, st0, false) // Save succeeds: quiesced
	src.Ring(migtest.Fill(migtest.GFillAfter, 0x5a5a5a5a))
	setMigState(t, sc, vfio.MigStateRunning)
	running("STOP -> RUNNING")
	src.WaitIdle()
	if pg := src.Page(migtest.GFillAfter); pg[0] != 0x5a || pg[abi.PageSize-1] != 0x5a {
		t.Fatal("the doorbell rung in STOP did not run after RUNNING")
	}

	mem0, st0 = snapshot(true)
	setMigState(t, sc, vfio.MigStatePreCopy)
	readMigData(t, sc, 1)
	setMigState(t, sc, vfio.MigStateRunning)
	running("PRE_COPY -> RUNNING")
	unchanged("PRE_COPY left for RUNNING", mem0, st0, true)

	mem0, _ = snapshot(true)
	setMigState(t, sc, vfio.MigStatePreCopy)
	readMigData(t, sc, 1)
	if err := sc.Reset(); err != nil {
		t.Fatal(err)
	}
	wantMigState(t, sc, vfio.MigStateRunning)
	running("DEVICE_RESET in PRE_COPY")
	if mem1, _ := snapshot(true); !bytes.Equal(mem0, mem1) {
		t.Fatal("a reset in PRE_COPY changed the source's memory")
	}
	// The reset cleared the GTT, the ring and the kernels: program them again.
	src = migtest.Program(t, src.V, 1)
	src.FillMemory(5)

	var buf bytes.Buffer
	if err := sc.SaveDevice(&buf); err != nil {
		t.Fatalf("a whole save after the aborted ones: %v", err)
	}
	if err := dc.LoadDevice(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	checkSameDevice(t, src.V, p.dv, sc, dc)
	setMigState(t, dc, vfio.MigStateRunning)
	src.CheckRunsAfter(p.dv)
}

// TestNativeUnderWorkload migrates a guest running a seeded, self-checking
// workload back and forth three times with each strategy, driven only
// through vfio-user as a QEMU would: on the source, over the guest's own
// connection, PRE_COPY read while the guest runs, then the guest paused,
// STOP_COPY read, STOP; on the destination, with the guest attached,
// LoadDevice and RUNNING. The final digest equals a never-migrated run's.
func TestNativeUnderWorkload(t *testing.T) {
	const (
		mem        = 8 << 20
		steps      = 150
		migrations = 3
		seed       = 777
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hosts := [2]*pool.Pool{migtest.NewPool(t, 4*mem), migtest.NewPool(t, 4*mem)}
	_ = migtest.NewVGPU(t, hosts[0], "filler", 1<<20)
	newServed := func(host int, name string, strat precopy.Strategy) *nativeServed {
		v, err := vgpu.New(vgpu.Config{Name: name, MemSize: mem}, hosts[host], migtest.Log)
		if err != nil {
			t.Fatal(err)
		}
		return serveNative(t, v, precopy.Options{Strategy: strat, Workers: 2, Log: migtest.Log})
	}
	cur := newServed(0, "g0", precopy.Strategies[0])
	m := migtest.StartVM(ctx, t, cur.Served, 1, seed, steps, guest.WorkloadConfig{Check: true})
	for i := range migrations {
		next := newServed((i+1)%2, fmt.Sprintf("g%d", i+1), precopy.Strategies[(i+1)%len(precopy.Strategies)])
		sc := m.Bus().Client()
		paused, err := m.HoldAfter(10+15*i, nil)
		if err != nil {
			t.Fatal(err)
		}
		setMigState(t, sc, vfio.MigStatePreCopy)
		data := readMigData(t, sc, 0)
		select {
		case <-paused:
		case <-m.Finished():
			t.Fatalf("migration %d: the workload ended before the pause (%v)", i+1, m.Wait())
		}
		setMigState(t, sc, vfio.MigStateStopCopy)
		data = append(data, readMigData(t, sc, 0)...)
		setMigState(t, sc, vfio.MigStateStop)

		bus, rebind, err := m.MoveTo(next.Served.Path, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Client().LoadDevice(bytes.NewReader(data)); err != nil {
			t.Fatalf("migration %d: %v", i+1, err)
		}
		setMigState(t, bus.Client(), vfio.MigStateRunning)
		if err := rebind(); err != nil {
			t.Fatal(err)
		}
		m.Resume()
		cur.Close()
		t.Logf("migration %d: %d bytes of migration data, guest paused at step %d, pool offset %#x",
			i+1, len(data), m.StoppedAt(), next.V.Partition().Offset)
		cur = next
	}
	if err := m.Wait(); err != nil {
		t.Fatalf("workload after %d migrations: %v", migrations, err)
	}
	got := migtest.Digest(t, m)
	if want := migtest.Reference(ctx, t, hosts[0], seed, steps, mem, guest.WorkloadConfig{}); got != want {
		t.Fatalf("digest after %d migrations %x, never migrated %x", migrations, got, want)
	}
}
