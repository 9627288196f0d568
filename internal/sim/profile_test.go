package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
)

// TestProfilesChecked runs every workload profile on a device with its
// reference model on (the device agrees with the model after every step),
// twice with different GTT permutations: the digests agree.
func TestProfilesChecked(t *testing.T) {
	p := newPool(t, 256<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, prof := range guest.Profiles() {
		t.Run(prof.String(), func(t *testing.T) {
			cfg := guest.WorkloadConfig{Profile: prof, Rate: 8, FPS: -1, Check: true, CheckTouched: true, Fill: 0.5}
			if prof == guest.ProfileChurn || prof == guest.ProfileCPU {
				cfg.MemSize = 4 << 20
			}
			if prof == guest.ProfileInference {
				cfg.MemSize = 24 << 20
			}
			var sums [2][32]byte
			for i := range sums {
				dev := serve(t, p, prof.String()+string(rune('a'+i)), 32<<20)
				d := open(t, attach(t, dev, Options{MSI: true}), guest.Options{Seed: int64(30 + i), UseIRQ: true})
				w, err := guest.NewWorkload(5, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Run(ctx, d, 12); err != nil {
					t.Fatal(err)
				}
				sums[i] = digest(t, w, d)
				if st := w.Stats(); st.Steps != 11 || st.PagesWritten != 11*cfg.StepPages() && prof != guest.ProfileMixed {
					t.Fatalf("stats %+v, want 11 steps of %d pages", st, cfg.StepPages())
				}
				if nonzero := countNonzeroPages(dev.v.Memory()); nonzero < 16<<20/4096*4/10 {
					t.Fatalf("fill 0.5 of 32 MiB: only %d pages hold data", nonzero)
				}
			}
			if sums[0] != sums[1] {
				t.Fatalf("digests differ across GTT permutations: %x, %x", sums[0][:8], sums[1][:8])
			}
		})
	}
}

func countNonzeroPages(mem []byte) int {
	n := 0
	for off := 0; off < len(mem); off += 4096 {
		for _, b := range mem[off : off+4096] {
			if b != 0 {
				n++
				break
			}
		}
	}
	return n
}

// TestProfileAchievedRate paces a churn workload at 20 steps a second and
// checks the achieved dirty rate: never above the rate asked for, and near
// it unless the machine is too loaded to keep up.
func TestProfileAchievedRate(t *testing.T) {
	p := newPool(t, 64<<20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := open(t, attach(t, serve(t, p, "rate", 16<<20), Options{MSI: true}), guest.Options{Seed: 1, UseIRQ: true})
	cfg := guest.WorkloadConfig{Profile: guest.ProfileChurn, Rate: 5, FPS: 20, MemSize: 8 << 20}
	w, err := guest.NewWorkload(2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.Run(ctx, d, 21); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	t.Logf("%d steps in %s: %.2f MiB/s, %.1f steps/s", st.Steps, time.Since(start).Round(time.Millisecond), st.Rate(), st.StepsPerSec())
	if st.Steps != 20 || st.PagesWritten != 20*cfg.StepPages() {
		t.Fatalf("stats %+v", st)
	}
	if st.Active < time.Second {
		t.Fatalf("20 steps at 20 a second took %s of guest time: not paced", st.Active)
	}
	// The pages asked for were written; the time may run over on a loaded
	// machine (each late step starts at once, without catching up).
	want := float64(cfg.StepPages()) * 20 * 4096 / (1 << 20)
	if r := st.Rate(); r > want*1.001 || r < want*0.3 || math.IsNaN(r) {
		t.Fatalf("achieved %.2f MiB/s, asked %.2f", r, want)
	}
}
