package sim

import (
	"context"
	"errors"
	"time"

	"github.com/gmig-dev/gmig/guest"
)

// RunHostile runs the hostile guest program (guest.Hostile) on the
// calling goroutine in place of the VM's workload, for d or until ctx
// ends. The VM pauses, holds and moves between attacks as it does between
// workload operations, so a hostile VM can be migrated while it attacks.
// onStart, if set, is given the program once it is set up (its Stats may
// be read from any goroutine). The error is guest.Hostile.Run's: the
// attempts the device did not refuse, or what stopped the program; ctx's
// end is not an error.
func (vm *VM) RunHostile(ctx context.Context, cfg guest.HostileConfig, d time.Duration, onStart func(*guest.Hostile)) error {
	end, err := vm.begin()
	if err != nil {
		return err
	}
	defer end()
	h, err := guest.NewHostile(vm.d, cfg)
	if err != nil {
		return err
	}
	h.SetGate(vm.gate)
	if onStart != nil {
		onStart(h)
	}
	err = h.Run(ctx, d)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Only the end of ctx stopped it: keep what was not refused.
		var kept []error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				if errors.Is(e, guest.ErrNotContained) {
					kept = append(kept, e)
				}
			}
		}
		return errors.Join(kept...)
	}
	return err
}
