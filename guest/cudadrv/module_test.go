package cudadrv

import (
	"encoding/binary"
	"testing"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/vgpu"
)

// scalePTX declares the one guest module the CUDA back end's software model
// runs (engine/nvidia/model.go): scale(base, threads, off, mul) multiplies
// the u32 at base+off+4i by mul for i < threads. The model plays it by
// name, so the body is what nvcc would make of it in spirit only.
const scalePTX = `.version 7.0
.target sm_52
.address_size 64
.visible .global .align 4 .u32 counter;
.visible .entry scale(
	.param .u64 base,
	.param .u64 threads,
	.param .u64 off,
	.param .u32 mul
)
{
	ret;
}
`

func TestModuleOnSoftwareBackEnd(t *testing.T) {
	l := initLib(t)
	_, r := l.ModuleLoadData(thread, []byte(scalePTX))
	want(t, "cuModuleLoadData on the software back end", r, ErrNotSupported)
}

func TestModuleLaunch(t *testing.T) {
	migtest.UseCUDAModel(t)
	l, _ := newLib(t, vgpu.Config{Backend: vgpu.BackendCUDA, GuestModules: true})
	must(t, l.Init(0))
	_, r := l.CtxCreate(thread, 0, 0)
	must(t, r)
	_, r = l.ModuleLoadData(thread, []byte{0x7f, 'E', 'L', 'F', 2, 1})
	want(t, "cuModuleLoadData of a cubin", r, ErrNoBinaryForGPU)
	_, r = l.ModuleLoadData(thread, []byte("not a module"))
	want(t, "cuModuleLoadData of text that is no PTX", r, ErrInvalidImage)
	m, r := l.ModuleLoadData(thread, []byte(scalePTX))
	must(t, r)
	_, r = l.ModuleGetFunction(m, "missing")
	want(t, "cuModuleGetFunction of a missing entry", r, ErrNotFound)
	_, _, r = l.ModuleGetGlobal(m, "counter")
	want(t, "cuModuleGetGlobal of a declared global", r, ErrNotSupported)
	_, _, r = l.ModuleGetGlobal(m, "nothing")
	want(t, "cuModuleGetGlobal of an undeclared name", r, ErrNotFound)
	f, r := l.ModuleGetFunction(m, "scale")
	must(t, r)
	if again, _ := l.ModuleGetFunction(m, "scale"); again != f {
		t.Fatalf("a second cuModuleGetFunction gave %#x, want %#x", again, f)
	}
	layout, r := l.FuncLayout(f)
	must(t, r)
	if len(layout.Params) != 4 || layout.Params[3].Size != 4 || layout.Size != 28 {
		t.Fatalf("scale's parameter layout %+v, want 8, 8, 8, 4 bytes", layout)
	}

	const words = 64
	a, r := l.MemAlloc(thread, 4*words)
	must(t, r)
	in := make([]byte, 4*words)
	for i := range words {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(i+1))
	}
	must(t, l.MemcpyHtoD(thread, a, in))
	off, err := l.Driver().ApertureOffset(a) // the kernel sees aperture offsets
	if err != nil {
		t.Fatal(err)
	}
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	params := binary.LittleEndian.AppendUint32(append(append(u64(0), u64(words)...), u64(off)...), 3)
	want(t, "cuLaunchKernel with a parameter missing", l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{256, 1, 1}, 0, 0, params[:24]), ErrInvalidValue)
	must(t, l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{words, 1, 1}, 0, 0, params))
	must(t, l.CtxSynchronize(thread))
	got := make([]byte, 4*words)
	must(t, l.MemcpyDtoH(thread, got, a))
	for i := range words {
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != 3*uint32(i+1) {
			t.Fatalf("word %d after scale by 3 is %d, want %d", i, v, 3*(i+1))
		}
	}
	must(t, l.ModuleUnload(m))
	want(t, "cuLaunchKernel after cuModuleUnload", l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, 0, params), ErrInvalidHandle)
	must(t, l.CtxSynchronize(thread))
}
