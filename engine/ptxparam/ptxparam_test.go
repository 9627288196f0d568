package ptxparam

import (
	"errors"
	"os"
	"reflect"
	"testing"
)

const ptx = `
.version 8.0
.target sm_90
.address_size 64

// a comment with .entry fake(.param .u8 x)
.visible .entry first(
	.param .u64 first_param_0,
	.param .u32 n,  /* 4 bytes after 8 */
	.param .align 8 .b8 s[12],
	.param .u8 flag,
	.param .f64 scale
)
{
	ret;
}

.entry none()
{
	ret;
}

.entry bad(.param .u128 q)
{
	ret;
}
`

// TestLayout: offsets follow each parameter's alignment (the type's size,
// or .align), arrays multiply the size, comments are not declarations.
func TestLayout(t *testing.T) {
	l, err := Of([]byte(ptx), "first")
	if err != nil {
		t.Fatal(err)
	}
	want := Layout{Params: []Param{
		{Name: "first_param_0", Offset: 0, Size: 8, Align: 8},
		{Name: "n", Offset: 8, Size: 4, Align: 4},
		{Name: "s", Offset: 16, Size: 12, Align: 8},
		{Name: "flag", Offset: 28, Size: 1, Align: 1},
		{Name: "scale", Offset: 32, Size: 8, Align: 8},
	}, Size: 40}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("Of(first) = %+v,\nwant %+v", l, want)
	}
	if l, err := Of([]byte(ptx), "none"); err != nil || l.Size != 0 || len(l.Params) != 0 {
		t.Errorf("Of(none) = %+v, %v; want empty", l, err)
	}
}

// TestRefusals: an unknown entry, an unknown type and a malformed
// declaration are refused with ErrPTX.
func TestRefusals(t *testing.T) {
	for _, c := range []struct{ src, entry string }{
		{ptx, "missing"},
		{ptx, "fake"},
		{ptx, "bad"},
		{".entry k(.param .u64)", "k"},
		{".entry k(.param .align 3 .b8 a[4])", "k"},
		{".entry k(.param .u32 a", "k"},
	} {
		if _, err := Of([]byte(c.src), c.entry); !errors.Is(err, ErrPTX) {
			t.Errorf("Of(%q, %s) = %v, want ErrPTX", c.src, c.entry, err)
		}
	}
}

// TestKernels13: the ABI 1.3 test kernels' PTX (docs/device-abi.md §6.10)
// has the layouts the guest programs build: vecAdd and matMulTiled u64,
// u64, u64, u32 (28 bytes); scaleAdd u64, u64, f32, u32 (24); empty none;
// scribble u64, u64, u32 (20).
func TestKernels13(t *testing.T) {
	src, err := os.ReadFile("../nvidia/testdata/kernels13.ptx")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entry   string
		offsets []uint32
		sizes   []uint32
		size    uint32
	}{
		{"vecAdd", []uint32{0, 8, 16, 24}, []uint32{8, 8, 8, 4}, 28},
		{"scaleAdd", []uint32{0, 8, 16, 20}, []uint32{8, 8, 4, 4}, 24},
		{"matMulTiled", []uint32{0, 8, 16, 24}, []uint32{8, 8, 8, 4}, 28},
		{"empty", nil, nil, 0},
		{"scribble", []uint32{0, 8, 16}, []uint32{8, 8, 4}, 20},
	} {
		l, err := Of(src, c.entry)
		if err != nil {
			t.Fatalf("%s: %v", c.entry, err)
		}
		var offs, sizes []uint32
		for _, p := range l.Params {
			offs, sizes = append(offs, p.Offset), append(sizes, p.Size)
		}
		if l.Size != c.size || !reflect.DeepEqual(offs, c.offsets) || !reflect.DeepEqual(sizes, c.sizes) {
			t.Errorf("%s: %+v, want offsets %v sizes %v, %d bytes", c.entry, l, c.offsets, c.sizes, c.size)
		}
	}
}
