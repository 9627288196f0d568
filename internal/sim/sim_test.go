package sim

import (
	"context"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
)

// TestSuite runs the full correctness suite over the simulator in each
// interrupt configuration.
func TestSuite(t *testing.T) {
	cases := []struct {
		name string
		sim  Options
		drv  guest.Options
	}{
		{"poll", Options{NoIRQ: true}, guest.Options{Seed: 1}},
		{"intx-poll", Options{}, guest.Options{Seed: 2}},
		{"intx-irq", Options{}, guest.Options{Seed: 3, UseIRQ: true}},
		{"msi-irq", Options{MSI: true}, guest.Options{Seed: 4, UseIRQ: true}},
		{"small-ring-per-entry-gtt", Options{GTTPerEntry: true}, guest.Options{Seed: 5, UseIRQ: true, RingSize: 4096}},
	}
	p := newPool(t, 256<<20)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := serve(t, p, "t-"+c.name, 16<<20)
			d := open(t, attach(t, dev, c.sim), c.drv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := guest.Suite(ctx, d)
			t.Logf("suite over %s:\n%s", c.name, r)
			if !r.OK() {
				t.Fatalf("%d checks failed", len(r.Failed()))
			}
			skipped := 0
			for _, ch := range r.Checks {
				if ch.Skipped {
					skipped++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[c.sim.NoIRQ]; skipped != want {
				t.Fatalf("%d checks skipped, want %d", skipped, want)
			}
		})
	}
}
