package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sysfs"
)

// hostile runs the hostile guest program (guest.Hostile, docs/security.md
// "Hostile guests") for -hostile-for: the attacks -hostile names, each
// checked refused or contained by the device. It reports its progress
// every -progress attacks and what it did at the end; it fails if any
// attempt was not refused or the device stopped serving it.
func hostile(ctx context.Context, bus guest.Bus, o options) bool {
	attacks, err := guest.ParseAttacks(o.hostile)
	if err != nil {
		report("hostile: %v", err)
		return false
	}
	d, err := guest.Open(bus, guest.Options{Seed: o.seed, UseIRQ: o.irq != sysfs.IRQNone})
	if err != nil {
		report("hostile: opening the device: %v", err)
		return false
	}
	h, err := guest.NewHostile(d, guest.HostileConfig{Seed: o.seed, Attacks: attacks})
	if err != nil {
		report("hostile: %v", err)
		return false
	}
	if o.progress > 0 {
		var n uint64
		h.SetGate(func(context.Context) error {
			if n++; n%uint64(o.progress) == 0 {
				st := h.Stats()
				report("hostile step %d attempts=%d refused=%d resets=%d", st.Steps, st.Attempts, st.Refused, st.Resets)
			}
			return nil
		})
	}
	attacks = h.Attacks()
	report("hostile started attacks=%s for=%s", joinAttacks(attacks), o.hostileFor)
	err = h.Run(ctx, o.hostileFor)
	st := h.Stats()
	var by []string
	for _, a := range attacks {
		by = append(by, fmt.Sprintf("%s=%d", a, st.ByAttack[a]))
	}
	report("hostile done steps=%d (%s) attempts=%d refused=%d failures=%d resets=%d storms=%d commands=%d",
		st.Steps, strings.Join(by, " "), st.Attempts, st.Refused, st.Failures, st.Resets, st.Storms, st.Commands)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			report("hostile: %s", line)
		}
		return false
	}
	return st.Failures == 0 && st.Steps > 0
}

func joinAttacks(as []guest.Attack) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = string(a)
	}
	return strings.Join(names, ",")
}
