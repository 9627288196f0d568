package nvidia

import (
	"errors"
	"strings"
	"testing"
)

// TestModelGridKernelRefusals: a PTX entry the model does not know loads
// but fails its launch naming it; matMulTiled runs only with 16×16
// blocks, and a kernel touching memory outside every allocation fails at
// the next Sync with CUDA_ERROR_LAUNCH_FAILED, once.
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
	if err := d.LaunchBuffer(mVecAdd, one, [3]uint32{32, 1, 1}, 0, 1, gridParamsOf(0x10, uint64(p), uint64(p), 8)); err != nil {
		t.Fatal(err)
	}
	err = d.Sync(1)
	if !errors.Is(err, modelLaunchFailed) {
		t.Errorf("vecAdd reading address 0x10: Sync %v, want CUDA_ERROR_LAUNCH_FAILED", err)
	}
	if err := d.Sync(1); err != nil {
		t.Errorf("second Sync: %v, want nil (reported once)", err)
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
