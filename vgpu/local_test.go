package vgpu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// Device-local memory (docs/device-abi.md §1.3, ABI 1.2) seen by the Go
// guest driver over vfio-user.

const (
	localMem  = 1 << 20
	localSize = 16 * abi.PageSize
)

// TestLocalMemoryThroughCommands: a guest allocates local memory at a
// graphics address above its aperture mapping and reaches it with FILL,
// DMA_TO_GFX and COPY; the bytes land in the vGPU's local memory, never in
// the aperture, and every engine write to it is reported at its offset
// past MemSize (what a migration marks).
func TestLocalMemoryThroughCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := migtest.NewPool(t, 4*localMem)
	v := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "loc", MemSize: localMem, GTTEntries: 1024, LocalMemSize: localSize})
	var mu sync.Mutex
	var wrote [][2]uint64
	if err := v.ObserveWrites(func(off, n uint64) { mu.Lock(); wrote = append(wrote, [2]uint64{off, n}); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	d := migtest.Attach(t, migtest.Serve(t, v), 1, sim.Options{}).Driver()
	if d.Caps()&abi.CapLocalMem == 0 || d.LocalMemSize() != localSize {
		t.Fatalf("CAPS %#x, LOCAL_MEM_SIZE %#x; want bit 4 and %#x", d.Caps(), d.LocalMemSize(), localSize)
	}
	ga, err := d.AllocLocal(3 * abi.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	if ga < d.MappedSize() {
		t.Fatalf("local allocation at %#x, inside the aperture mapping of %#x bytes", ga, d.MappedSize())
	}
	gpa, ram, err := d.Bus().DMA().Alloc(abi.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ram {
		ram[i] = byte(i*7 + 1)
	}
	back, err := d.Alloc(abi.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	run := func(f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	run(func() error { return d.Fill(ga, abi.PageSize, 0x5a5a5a5a) })
	run(func() error { return d.DMAToGfx(ga+abi.PageSize, gpa, abi.PageSize) })
	run(func() error { return d.Copy(ga+2*abi.PageSize, ga+abi.PageSize, abi.PageSize) })
	run(func() error { return d.Copy(back, ga+2*abi.PageSize, abi.PageSize) })
	run(func() error { return d.Wait(ctx, d.Fence(0)) })
	run(d.CheckErrors)

	got := make([]byte, abi.PageSize)
	run(func() error { return d.ReadGA(back, got) })
	if !bytes.Equal(got, ram[:abi.PageSize]) {
		t.Error("DMA into local memory, COPY local to local and back to the aperture lost the bytes")
	}
	loc := v.LocalMemory()
	if !bytes.Equal(loc[:abi.PageSize], bytes.Repeat([]byte{0x5a}, abi.PageSize)) ||
		!bytes.Equal(loc[abi.PageSize:2*abi.PageSize], ram) || !bytes.Equal(loc[2*abi.PageSize:3*abi.PageSize], ram) {
		t.Error("local pages 0..2 do not hold the FILL, DMA and COPY results")
	}
	if bytes.Contains(v.Memory(), bytes.Repeat([]byte{0x5a}, 64)) {
		t.Error("the FILL of local memory shows in the aperture")
	}
	mu.Lock()
	defer mu.Unlock()
	local := 0
	for _, w := range wrote {
		if w[0] >= localMem {
			local++
			if w[0]+w[1] > localMem+localSize {
				t.Errorf("write reported at [%#x, +%#x), past local memory", w[0], w[1])
			}
		}
	}
	if local != 3 {
		t.Errorf("%d writes reported in local memory, want 3 (FILL, DMA, COPY): %v", local, wrote)
	}
	mu.Unlock()
	// A device reset clears the GTT; the driver maps local memory again
	// and its bytes are still there (a reset clears no memory).
	run(d.Reset)
	clear(got)
	run(func() error { return d.WriteGA(back, got) })
	run(func() error { return d.Copy(back, ga+abi.PageSize, abi.PageSize) })
	run(func() error { return d.Wait(ctx, d.Fence(0)) })
	run(func() error { return d.ReadGA(back, got) })
	if !bytes.Equal(got, ram[:abi.PageSize]) {
		t.Error("after a device reset, local memory is not mapped where it was")
	}
	mu.Lock()
	run(func() error { return d.FreeLocal(ga) })
	if _, err := d.AllocLocal(localSize + abi.PageSize); !errors.Is(err, guest.ErrNoGraphicsMemory) {
		t.Errorf("AllocLocal beyond LOCAL_MEM_SIZE: %v, want ErrNoGraphicsMemory", err)
	}
}

// TestNoLocalMemoryIsTodaysDevice: a vGPU created without local memory is
// the device a 1.1 guest knows: CAPS bit 4 clear, LOCAL_MEM_SIZE reads 0,
// a GTT entry with bit 2 is refused as reserved and leaves the entry as
// it was, and its Spec's JSON has no new field.
func TestNoLocalMemoryIsTodaysDevice(t *testing.T) {
	p := migtest.NewPool(t, 4*localMem)
	v := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "plain", MemSize: localMem, GTTEntries: 1024})
	m := migtest.Attach(t, migtest.Serve(t, v), 1, sim.Options{})
	d, bus := m.Driver(), m.Bus()
	if d.Caps()&abi.CapLocalMem != 0 || d.LocalMemSize() != 0 {
		t.Fatalf("CAPS %#x, LocalMemSize %#x; want neither", d.Caps(), d.LocalMemSize())
	}
	if n, err := bus.ReadReg64(abi.RegLocalMemSize); n != 0 || err != nil {
		t.Errorf("LOCAL_MEM_SIZE = %#x, %v; want 0 as an unlisted register", n, err)
	}
	const idx = 1000
	if err := bus.WriteGTT(idx, []uint64{guest.LocalGTTEntry(0, true)}); err != nil {
		t.Fatal(err)
	}
	var de *guest.DeviceError
	if err := d.CheckErrors(); !errors.As(err, &de) || de.Status&abi.ErrGTTEntry == 0 {
		t.Errorf("GTT entry with bit 2: %v, want ERR_STATUS.GTT_ENTRY", err)
	}
	if _, err := d.AllocLocal(abi.PageSize); !errors.Is(err, guest.ErrNoGraphicsMemory) {
		t.Errorf("AllocLocal without local memory: %v, want ErrNoGraphicsMemory", err)
	}
	b, err := json.Marshal(v.Spec())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "local") {
		t.Errorf("spec JSON %s names local memory", b)
	}
}

// TestLocalMemorySpec: the Spec carries the local size and CAPS bit 4, a
// destination makes the same vGPU from it and another size is not it; a
// size of part of a page is refused; the cuda back end has local memory
// too.
func TestLocalMemorySpec(t *testing.T) {
	p := migtest.NewPool(t, 4*localMem)
	v := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "s", MemSize: localMem, LocalMemSize: localSize})
	s := v.Spec()
	if s.LocalMemSize != localSize || s.Caps&abi.CapLocalMem == 0 {
		t.Fatalf("spec %+v", s)
	}
	c, err := s.Config("d")
	if err != nil || c.LocalMemSize != localSize {
		t.Fatalf("Config = %+v, %v", c, err)
	}
	s2 := s
	s2.LocalMemSize *= 2
	if err := v.Is(s2); !errors.Is(err, vgpu.ErrSpec) || !strings.Contains(err.Error(), "local memory size") {
		t.Errorf("Is(other local size) = %v", err)
	}
	if _, err := vgpu.New(vgpu.Config{Name: "odd", MemSize: localMem, LocalMemSize: 100}, p, migtest.Log); !errors.Is(err, vgpu.ErrConfig) {
		t.Errorf("New(local size 100) = %v, want ErrConfig", err)
	}
	// The cuda back end has it too (on the GPU alone): GPU 0 where there
	// is one, the model of a GPU elsewhere.
	if _, err := nvidia.OpenGPU(vgpu.GPUOrdinal); err != nil {
		t.Setenv(nvidia.ModelEnv, "1")
	}
	cs := s
	cs.Backend = vgpu.BackendCUDA
	c, err = cs.Config("cuda")
	if err != nil {
		t.Fatalf("a cuda spec with local memory: %v", err)
	}
	v2, err := vgpu.New(c, p, migtest.Log)
	if err != nil {
		t.Fatalf("New(cuda with local memory) = %v", err)
	}
	defer v2.Close()
	if got := v2.Spec(); got != cs || got.Caps&abi.CapDeviceAddr == 0 {
		t.Errorf("cuda vGPU's spec %+v, want %+v with CAPS bit 6", got, cs)
	}
}
