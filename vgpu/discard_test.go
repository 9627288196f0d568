package vgpu_test

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/memprobe"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
	"golang.org/x/sys/unix"
)

// TestDiscardLocal: a cuda vGPU gives the host pages of its receive
// buffer (LocalMemory) back page-exactly — the discarded ones read as
// zeros and are not resident, the others keep their bytes — within its
// local memory only, and not once closed; a software vGPU, whose local
// memory is those pages, refuses (ErrLocalInPool) and keeps them.
func TestDiscardLocal(t *testing.T) {
	migtest.UseCUDAModel(t)
	p := migtest.NewPool(t, 4*localMem)
	sw := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "sw", MemSize: localMem, LocalMemSize: localSize})
	copy(sw.LocalMemory(), "kept")
	if err := sw.DiscardLocal(0, 1); !errors.Is(err, vgpu.ErrLocalInPool) {
		t.Errorf("software back end: DiscardLocal = %v, want ErrLocalInPool", err)
	}
	if string(sw.LocalMemory()[:4]) != "kept" {
		t.Error("the software vGPU's local memory changed")
	}

	cu := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "cu", MemSize: localMem, LocalMemSize: localSize, Backend: vgpu.BackendCUDA})
	loc := cu.LocalMemory()
	copy(loc, bytes.Repeat([]byte{0x5c}, len(loc))) // pages received, as a destination's
	if err := cu.DiscardLocal(2, 3); err != nil {
		t.Fatal(err)
	}
	const pages = localSize / abi.PageSize
	if n, err := memprobe.Resident(loc); err != nil || n != pages-3 {
		t.Errorf("%d local pages resident (%v), want %d", n, err, pages-3)
	}
	if !bytes.Equal(loc[2*abi.PageSize:5*abi.PageSize], make([]byte, 3*abi.PageSize)) {
		t.Error("discarded pages do not read as zeros")
	}
	if bytes.Count(loc[:2*abi.PageSize], []byte{0x5c})+bytes.Count(loc[5*abi.PageSize:], []byte{0x5c}) != len(loc)-3*abi.PageSize {
		t.Error("pages outside [2, 5) changed")
	}
	for _, r := range [][2]int{{pages - 2, 3}, {-1, 1}, {0, -1}} {
		if err := cu.DiscardLocal(r[0], r[1]); !errors.Is(err, pool.ErrRange) {
			t.Errorf("DiscardLocal(%d, %d) = %v, want pool.ErrRange", r[0], r[1], err)
		}
	}
	if err := cu.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cu.DiscardLocal(0, 1); !errors.Is(err, vgpu.ErrClosed) {
		t.Errorf("closed: DiscardLocal = %v, want ErrClosed", err)
	}
}

// TestFreeLocal: a cuda vGPU lets the kernel take the host pages of its
// receive buffer lazily (MADV_FREE): a freed page written again costs this
// thread no page fault (a discarded one does: a fresh zero page), each
// freed page reads as its old bytes or, if the kernel took it, as zeros,
// the pages outside the range keep theirs, and the range and the closed
// vGPU are refused as DiscardLocal refuses them.
func TestFreeLocal(t *testing.T) {
	migtest.UseCUDAModel(t)
	p := migtest.NewPool(t, 4*localMem)
	cu := migtest.NewVGPUConfig(t, p, vgpu.Config{Name: "cu", MemSize: localMem, LocalMemSize: localSize, Backend: vgpu.BackendCUDA})
	loc := cu.LocalMemory()
	copy(loc, bytes.Repeat([]byte{0x5c}, len(loc)))
	if err := cu.FreeLocal(2, 3); err != nil {
		t.Fatal(err)
	}
	for pg := 2; pg < 5; pg++ {
		page := loc[pg*abi.PageSize : (pg+1)*abi.PageSize]
		if n := bytes.Count(page, []byte{0x5c}); n != 0 && n != abi.PageSize {
			t.Errorf("freed page %d holds %d old bytes, want all or none", pg, n)
		}
	}
	if bytes.Count(loc[:2*abi.PageSize], []byte{0x5c})+bytes.Count(loc[5*abi.PageSize:], []byte{0x5c}) != len(loc)-3*abi.PageSize {
		t.Error("pages outside [2, 5) changed")
	}
	// Written again on one thread: no fault after FreeLocal, a fault a page
	// (or one for a huge page) after DiscardLocal.
	write := func(first int) int64 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var before, after unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &before)
		for pg := first; pg < first+3; pg++ {
			loc[pg*abi.PageSize+7] = 0xa1
		}
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &after)
		return after.Minflt - before.Minflt
	}
	if n := write(2); n != 0 {
		t.Errorf("writing 3 lazily freed pages took %d page faults, want 0", n)
	}
	if loc[2*abi.PageSize+7] != 0xa1 {
		t.Error("a freed page written again lost the write")
	}
	if err := cu.DiscardLocal(5, 3); err != nil {
		t.Fatal(err)
	}
	if n := write(5); n < 1 {
		t.Errorf("writing 3 discarded pages took %d page faults, want some (3; 1 where a huge page backs them)", n)
	}
	const pages = localSize / abi.PageSize
	if err := cu.FreeLocal(pages-2, 3); !errors.Is(err, pool.ErrRange) {
		t.Errorf("FreeLocal past the end = %v, want pool.ErrRange", err)
	}
	if err := cu.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cu.FreeLocal(0, 1); !errors.Is(err, vgpu.ErrClosed) {
		t.Errorf("closed: FreeLocal = %v, want ErrClosed", err)
	}
}
