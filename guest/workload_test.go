package guest

import (
	"reflect"
	"testing"
)

func trace(t *testing.T, seed int64, steps int) [][]Op {
	t.Helper()
	w, err := NewWorkload(seed, WorkloadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]Op, steps)
	for i := range out {
		out[i] = w.Next()
	}
	return out
}

// TestWorkloadDeterministic checks that a seed fixes the op trace and that
// different seeds give different traces.
func TestWorkloadDeterministic(t *testing.T) {
	a, b := trace(t, 7, 300), trace(t, 7, 300)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different traces")
	}
	c := trace(t, 8, 300)
	if reflect.DeepEqual(a[1:], c[1:]) {
		t.Fatal("different seeds, same trace")
	}
}

// TestWorkloadMix checks that a trace covers every kind of operation and
// stays inside its zones.
func TestWorkloadMix(t *testing.T) {
	w, err := NewWorkload(3, WorkloadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := w.l
	seen := map[OpKind]int{}
	loaded := map[uint32]bool{}
	for range 500 {
		for _, op := range w.Next() {
			seen[op.Kind]++
			switch op.Kind {
			case OpFill, OpDMATo:
				if op.Dst+op.Len > l.bytesLen || op.Len == 0 {
					t.Fatalf("%s outside the byte zone", op)
				}
			case OpCopy:
				if op.Dst+op.Len > l.bytesLen || op.Src+op.Len > l.size {
					t.Fatalf("%s out of range", op)
				}
			case OpDMAFrom:
				if op.Src+op.Len > l.size {
					t.Fatalf("%s out of range", op)
				}
			case OpLoad:
				if loaded[op.Handle] {
					t.Fatalf("%s: handle already loaded", op)
				}
				loaded[op.Handle] = true
			case OpUnload:
				if !loaded[op.Handle] {
					t.Fatalf("%s: handle not loaded", op)
				}
				delete(loaded, op.Handle)
			case OpSaxpy, OpStencil, OpRender:
				if !loaded[op.Handle] {
					t.Fatalf("%s: launch of a handle not loaded", op)
				}
			}
			if op.Kind == OpFill && (op.Dst%4 != 0 || op.Len%4 != 0) {
				t.Fatalf("%s: unaligned fill", op)
			}
		}
		if len(loaded) > maxWorkloadKernels {
			t.Fatalf("%d kernels loaded", len(loaded))
		}
	}
	for k := range OpCPUScatter { // the mix's kinds; the later ones are the profiles'
		if seen[k] == 0 {
			t.Errorf("no %s in 500 steps", k)
		}
	}
}

func TestWorkloadLayout(t *testing.T) {
	if _, err := NewWorkload(1, WorkloadConfig{MemSize: 64 << 10}); err == nil {
		t.Fatal("a 64 KiB region accepted for the default arrays")
	}
	w, err := NewWorkload(1, WorkloadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := w.l
	zones := [][2]uint64{{0, l.bytesLen}, {l.x, 4 * l.saxpyN}, {l.y, 4 * l.saxpyN}, {l.gridA, l.gridLen}, {l.gridB, l.gridLen}, {l.fb, l.fbLen}}
	for i := 1; i < len(zones); i++ {
		if prev := zones[i-1]; prev[0]+prev[1] > zones[i][0] {
			t.Fatalf("zone %d overlaps zone %d: %v", i-1, i, zones)
		}
	}
	if last := zones[len(zones)-1]; last[0]+last[1] > l.size {
		t.Fatalf("zones overrun the region: %v", zones)
	}
}
