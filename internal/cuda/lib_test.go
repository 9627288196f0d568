package cuda

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// TestBindFuncs binds unexported func fields to libc, as Open binds the
// driver's, and reports a missing symbol instead of panicking.
func TestBindFuncs(t *testing.T) {
	lib, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	var fns struct {
		strlen  func(s string) uintptr
		abs     func(v int32) int32
		missing func() int32
	}
	got := bindFuncs(lib, &fns, map[string]string{"missing": "gmig_no_such_symbol"})
	if !slices.Equal(got, []string{"gmig_no_such_symbol"}) {
		t.Fatalf("missing %v", got)
	}
	if n := fns.strlen("gmig"); n != 4 {
		t.Fatalf("strlen = %d", n)
	}
	if v := fns.abs(-7); v != 7 {
		t.Fatalf("abs = %d", v)
	}
}

// TestOpenWithoutDriver checks that a machine without libcuda.so.1 gets
// ErrNoDriver, not a crash.
func TestOpenWithoutDriver(t *testing.T) {
	_, err := Open()
	if err == nil {
		t.Skip("this machine has a CUDA driver")
	}
	if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open = %v, want ErrNoDriver or ErrNoDevice", err)
	}
}

// TestDriverSignatures registers every driver entry point's Go signature
// (against an unrelated libc symbol, never called): purego refuses
// argument kinds it cannot pass at registration, so this catches them on
// machines without the driver.
func TestDriverSignatures(t *testing.T) {
	lib, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	abs, err := purego.Dlsym(lib, "abs")
	if err != nil {
		t.Fatal(err)
	}
	var fn funcs
	v := reflect.ValueOf(&fn).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %v", v.Type().Field(i).Name, r)
				}
			}()
			purego.RegisterFunc(reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Interface(), abs)
		}()
	}
}

// TestStructSizes checks the mirrors of cuda.h structs: CUmemAllocationProp
// is 32 bytes, CUmemAccessDesc 12.
func TestStructSizes(t *testing.T) {
	if n := unsafe.Sizeof(allocProp{}); n != 32 {
		t.Errorf("allocProp is %d bytes, want 32", n)
	}
	if n := unsafe.Sizeof(accessDesc{}); n != 12 {
		t.Errorf("accessDesc is %d bytes, want 12", n)
	}
	if o := unsafe.Offsetof(allocProp{}.win32Meta); o != 16 {
		t.Errorf("allocProp.win32HandleMetaData at %d, want 16", o)
	}
}

// TestFormatUUID checks that a CUuuid is written as NVML writes a GPU's
// UUID, so that the two can be matched.
func TestFormatUUID(t *testing.T) {
	u := [16]byte{0x2a, 0x4b, 0x1c, 0x3d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6, 0xe7, 0xf8, 0x09}
	if got, want := FormatUUID(u), "GPU-2a4b1c3d-5e6f-7081-92a3-b4c5d6e7f809"; got != want {
		t.Fatalf("FormatUUID = %s, want %s", got, want)
	}
}
