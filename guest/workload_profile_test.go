package guest

import (
	"reflect"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

func profileTrace(t *testing.T, seed int64, cfg WorkloadConfig, steps int) [][]Op {
	t.Helper()
	w, err := NewWorkload(seed, cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]Op, steps)
	for i := range out {
		out[i] = w.Next()
	}
	return out
}

// TestProfilesDeterministic checks that a seed fixes every profile's trace,
// and that the seeded profiles differ across seeds.
func TestProfilesDeterministic(t *testing.T) {
	for _, p := range Profiles() {
		t.Run(p.String(), func(t *testing.T) {
			cfg := WorkloadConfig{Profile: p}
			a, b := profileTrace(t, 7, cfg, 50), profileTrace(t, 7, cfg, 50)
			if !reflect.DeepEqual(a, b) {
				t.Fatal("same seed, different traces")
			}
			switch p {
			case ProfileChurn, ProfileCPU, ProfileInference, ProfileMixed, ProfileStencil:
				if c := profileTrace(t, 8, cfg, 50); reflect.DeepEqual(a, c) {
					t.Fatal("different seeds, same trace")
				}
			}
		})
	}
}

// TestProfileRate checks that each profile plans the pages its rate asks
// for, every step after the first, and stays inside its region.
func TestProfileRate(t *testing.T) {
	for _, c := range []struct {
		spec  string
		pages uint64 // per step
	}{
		{"idle", 0},
		{"render", 853},                // 200 MiB/s at 60 fps
		{"render,rate=60,fps=30", 512}, // 2 MiB a frame
		{"stencil,rate=30", 128},
		{"churn,rate=100", 427},
		{"cpu,rate=15", 64},
		{"inference", 85},
		{"inference,rate=2", 9}, // activations only
	} {
		t.Run(c.spec, func(t *testing.T) {
			cfg, err := ParseWorkload(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.StepPages(); got != c.pages {
				t.Fatalf("StepPages %d, want %d", got, c.pages)
			}
			w, err := NewWorkload(1, cfg)
			if err != nil {
				t.Fatal(err)
			}
			size := w.l.size
			for step := range 40 {
				var pages uint64
				for _, op := range w.Next() {
					if op.Dst+op.Len > size || op.Kind == OpRender && op.Dst+w.l.fbLen > size {
						t.Fatalf("step %d: %s outside the %#x-byte region", step, op, size)
					}
					pages += w.pagesWritten(op)
				}
				if step > 0 && pages != c.pages {
					t.Fatalf("step %d writes %d pages, want %d", step, pages, c.pages)
				}
			}
		})
	}
}

// TestParseWorkload checks specs, their round trip through Spec, and
// refusals.
func TestParseWorkload(t *testing.T) {
	for _, spec := range []string{"mixed", "render", "render,rate=200,fps=60,mem=64M,fill=0.75", "churn,rate=12.5,fps=0", "inference,mem=1G"} {
		cfg, err := ParseWorkload(spec)
		if err != nil {
			t.Fatalf("%q: %v", spec, err)
		}
		if got := cfg.Spec(); got != spec {
			t.Errorf("%q reads back as %q", spec, got)
		}
	}
	cfg, _ := ParseWorkload("churn,fps=0,mem=4096")
	if cfg.FPS >= 0 || cfg.MemSize != abi.PageSize {
		t.Errorf("fps=0 mem=4096: %+v", cfg)
	}
	for _, bad := range []string{"dance", "render,rate", "render,rate=-1", "render,fill=2", "render,speed=3", "render,mem=lots"} {
		if _, err := ParseWorkload(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := NewWorkload(1, WorkloadConfig{Profile: ProfileRender, MemSize: 1 << 20}); err == nil {
		t.Error("a 1 MiB region accepted for a 3.3 MiB framebuffer")
	}
}

// TestPrefill checks that a prefill is seeded, fills about the fraction
// asked, skips what it must and gives every page its own bytes.
func TestPrefill(t *testing.T) {
	const pages = 1024
	a, b := make([]byte, pages*abi.PageSize), make([]byte, pages*abi.PageSize)
	skip := make([]bool, pages)
	skip[3], skip[700] = true, true
	na, nb := Prefill(a, 0.5, 9, skip), Prefill(b, 0.5, 9, skip)
	if na != nb || string(a) != string(b) {
		t.Fatal("same seed, different prefill")
	}
	if na < pages*4/10 || na > pages*6/10 {
		t.Fatalf("%d of %d pages filled at 0.5", na, pages)
	}
	seen := map[string]bool{}
	zero := make([]byte, abi.PageSize)
	filled := 0
	for p := range pages {
		pg := string(a[p*abi.PageSize : (p+1)*abi.PageSize])
		if pg == string(zero) {
			continue
		}
		if skip[p] {
			t.Fatalf("skipped page %d filled", p)
		}
		if seen[pg] {
			t.Fatalf("page %d repeats another", p)
		}
		seen[pg] = true
		filled++
	}
	if filled != na {
		t.Fatalf("%d pages hold data, Prefill says %d", filled, na)
	}
	if Prefill(b, 0, 9, nil) != 0 {
		t.Fatal("fill 0 filled pages")
	}
}
