package qemu

import (
	"context"
	"fmt"
)

// EndOrphanedMigration ends the outgoing migration a QEMU was left in by
// the gmigd that died while driving it (migration-protocol.md §5, "source
// gmigd killed"), and returns QEMU's run state afterwards and the
// migration's status as it was found ("" when there was none).
//
// A migration still in flight never completed: no destination can run
// the VM (a destination resumes only on the source's commit, which comes
// after QEMU's completion), so it is cancelled and the VM runs on here,
// continued if it stays paused. A completed one may run at the
// destination: the VM is left as it is, paused.
func (vm *VM) EndOrphanedMigration(ctx context.Context) (state, migration string, err error) {
	p, err := vm.MigrationInfo()
	if err != nil {
		return "", "", err
	}
	switch p.Status {
	case "setup", "active", "pre-switchover", "device", "wait-unplug":
		if err := (&Outgoing{VM: vm}).Resume(ctx); err != nil {
			return "", p.Status, fmt.Errorf("qemu: ending the migration in flight (%s): %w", p.Status, err)
		}
	}
	state, err = vm.Status()
	return state, p.Status, err
}
