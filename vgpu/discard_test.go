package vgpu_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/memprobe"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
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
