package nvidia

import (
	"errors"
	"strings"
	"testing"
)

// TestModelGridKernelRefusals: a PTX entry the model does not know loads
// but fails its launch naming it; matMulTiled runs only with 16×16
// blocks, and a kernel touching memory outside every allocation fails at
// the next Sync with CUDA_ERROR_LAUNCH_FAILED. A kernel's failure is
// sticky, as CUDA's: every later call that does work answers it.
func TestModelGridKernelRefusals(t *testing.T) {
	d := NewModelGPU().ops.(*modelDevice)
	one := [3]uint32{1, 1, 1}
	f, err := d.Function(1, "mystery")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.LaunchBuffer(f, one, one, 0, 1, nil); err == nil || !strings.Contains(err.Error(), `"mystery"`) {
		t.Errorf("launch of an unknown entry: %v, want an error naming it", err)
	}
	if err := d.LaunchBuffer(mVecAdd, one, one, 0, 1, make([]byte, 24)); err == nil {
		t.Error("vecAdd with a 24-byte buffer launched")
	}
	p, _ := d.Alloc(4 * 16 * 16)
	mm := gridParamsOf(uint64(p), uint64(p), uint64(p), 16)
	if err := d.LaunchBuffer(mMatMulTiled, one, [3]uint32{8, 8, 1}, 0, 1, mm); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(1); err == nil || !strings.Contains(err.Error(), "16x16x1") {
		t.Errorf("matMulTiled with 8x8 blocks: Sync %v, want a launch failure naming the block", err)
	}
	if err := d.LaunchBuffer(mVecAdd, one, one, 0, 1, gridParamsOf(uint64(p), uint64(p), uint64(p), 1)); !errors.Is(err, modelLaunchFailed) {
		t.Errorf("launch after a failed kernel: %v, want the sticky CUDA_ERROR_LAUNCH_FAILED", err)
	}

	d = NewModelGPU().ops.(*modelDevice)
	p, _ = d.Alloc(4 * 16)
	if err := d.LaunchBuffer(mVecAdd, one, [3]uint32{32, 1, 1}, 0, 1, gridParamsOf(0x10, uint64(p), uint64(p), 8)); err != nil {
		t.Fatal(err)
	}
	err = d.Sync(1)
	if !errors.Is(err, modelLaunchFailed) {
		t.Errorf("vecAdd reading address 0x10: Sync %v, want CUDA_ERROR_LAUNCH_FAILED", err)
	}
	for name, call := range map[string]func() error{
		"Sync":     func() error { return d.Sync(1) },
		"CopyHtoD": func() error { return d.CopyHtoD(p, make([]byte, 4), 1) },
		"CopyDtoH": func() error { return d.CopyDtoH(make([]byte, 4), p, 1) },
		"Alloc":    func() error { _, err := d.Alloc(4096); return err },
		"Launch":   func() error { return d.Launch(mNop, 1, 1, 1) },
	} {
		if err := call(); !errors.Is(err, modelLaunchFailed) {
			t.Errorf("%s after the failure: %v, want the sticky CUDA_ERROR_LAUNCH_FAILED", name, err)
		}
	}
}

// TestModelScribble: the hostile kernel stores its pattern over a range
// of the device's memory, and faults over a range no allocation holds.
func TestModelScribble(t *testing.T) {
	d := NewModelGPU().ops.(*modelDevice)
	p, _ := d.Alloc(4096)
	params := append(gridParamsOf(uint64(p)+8, 16, 0, 0)[:16], 0xef, 0xbe, 0xad, 0xde)
	if err := d.LaunchBuffer(mScribble, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, 1, params); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(1); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if err := d.CopyDtoH(got, p, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4096; i += 4 {
		w := uint32(got[i]) | uint32(got[i+1])<<8 | uint32(got[i+2])<<16 | uint32(got[i+3])<<24
		if want := map[bool]uint32{true: 0xdeadbeef, false: 0}[i >= 8 && i < 8+64]; w != want {
			t.Fatalf("word at %d: %#x, want %#x", i, w, want)
		}
	}
	params = append(gridParamsOf(uint64(p)+4096, 1, 0, 0)[:16], 1, 0, 0, 0)
	if err := d.LaunchBuffer(mScribble, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, 1, params); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(1); !errors.Is(err, modelLaunchFailed) {
		t.Errorf("scribble past the allocation: Sync %v, want CUDA_ERROR_LAUNCH_FAILED", err)
	}
}

// gridParamsOf is a vecAdd-shaped parameter buffer: three pointers and n.
func gridParamsOf(a, b, c uint64, n uint32) []byte {
	var out []byte
	for _, v := range []uint64{a, b, c} {
		out = append(out, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
	}
	return append(out, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
}
