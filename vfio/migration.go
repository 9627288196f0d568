package vfio

import (
	"errors"
	"fmt"
)

// The VFIO migration v2 state machine (linux/vfio.h, "enum
// vfio_device_mig_state" and the comment above it; vfio-user.rst,
// "VFIO_DEVICE_FEATURE_MIG_DEVICE_STATE"), as data: the single-hop arcs a
// device implements, and NextHop, which walks a requested transition one arc
// at a time the way drivers/vfio/vfio_main.c vfio_mig_get_next_state does.

// MigState is a device migration state, enum vfio_device_mig_state.
type MigState uint32

// Migration states: linux/vfio.h enum vfio_device_mig_state.
const (
	MigStateError      MigState = 0 // VFIO_DEVICE_STATE_ERROR
	MigStateStop       MigState = 1 // VFIO_DEVICE_STATE_STOP
	MigStateRunning    MigState = 2 // VFIO_DEVICE_STATE_RUNNING
	MigStateStopCopy   MigState = 3 // VFIO_DEVICE_STATE_STOP_COPY
	MigStateResuming   MigState = 4 // VFIO_DEVICE_STATE_RESUMING
	MigStateRunningP2P MigState = 5 // VFIO_DEVICE_STATE_RUNNING_P2P
	MigStatePreCopy    MigState = 6 // VFIO_DEVICE_STATE_PRE_COPY
	MigStatePreCopyP2P MigState = 7 // VFIO_DEVICE_STATE_PRE_COPY_P2P

	numMigStates = 8
)

var migStateNames = [numMigStates]string{
	MigStateError:      "ERROR",
	MigStateStop:       "STOP",
	MigStateRunning:    "RUNNING",
	MigStateStopCopy:   "STOP_COPY",
	MigStateResuming:   "RESUMING",
	MigStateRunningP2P: "RUNNING_P2P",
	MigStatePreCopy:    "PRE_COPY",
	MigStatePreCopyP2P: "PRE_COPY_P2P",
}

// String returns the state's name without the VFIO_DEVICE_STATE_ prefix, or
// "MigState(n)".
func (s MigState) String() string {
	if s < numMigStates {
		return migStateNames[s]
	}
	return fmt.Sprintf("MigState(%d)", uint32(s))
}

// saving reports whether s is in the "saving group" (PRE_COPY, PRE_COPY_P2P,
// STOP_COPY), whose states share one data transfer session.
func (s MigState) saving() bool {
	return s == MigStatePreCopy || s == MigStatePreCopyP2P || s == MigStateStopCopy
}

// Migration flags: linux/vfio.h struct vfio_device_feature_migration;
// vfio-user.rst, "VFIO_DEVICE_FEATURE_MIGRATION".
const (
	MigrationStopCopy uint64 = 1 << 0 // VFIO_MIGRATION_STOP_COPY
	MigrationP2P      uint64 = 1 << 1 // VFIO_MIGRATION_P2P
	MigrationPreCopy  uint64 = 1 << 2 // VFIO_MIGRATION_PRE_COPY
)

// migStateNeeds is the migration flags a device must advertise for each
// state to exist (vfio.h: RUNNING and ERROR always, STOP_COPY at least, the
// P2P and PRE_COPY states only with their flags). ERROR is never a target.
var migStateNeeds = [numMigStates]uint64{
	MigStateStop:       MigrationStopCopy,
	MigStateRunning:    MigrationStopCopy,
	MigStateStopCopy:   MigrationStopCopy,
	MigStateResuming:   MigrationStopCopy,
	MigStateRunningP2P: MigrationStopCopy | MigrationP2P,
	MigStatePreCopy:    MigrationStopCopy | MigrationPreCopy,
	MigStatePreCopyP2P: MigrationStopCopy | MigrationP2P | MigrationPreCopy,
}

// migStateSupported reports whether s exists on a device with these flags.
func migStateSupported(s MigState, flags uint64) bool {
	return s != MigStateError && s < numMigStates && flags&migStateNeeds[s] == migStateNeeds[s]
}

// migArc is one single-hop transition the device implements, present when
// the device's flags include all of needs and none of unless.
type migArc struct {
	from, to MigState
	needs    uint64
	unless   uint64
}

// migArcs are the FSM arcs of linux/vfio.h, each under the line of that
// comment that defines it. The last three are the arcs a device without P2P
// sees in place of a pair through RUNNING_P2P or PRE_COPY_P2P
// (vfio_main.c: "Arcs touching optional and unsupported states are skipped
// over"); they are the arcs vfio-user.rst lists under "Direct State
// Transitions". STOP_COPY -> PRE_COPY and STOP_COPY -> PRE_COPY_P2P are
// absent: "These arcs are not permitted".
var migArcs = []migArc{
	// "RUNNING_P2P -> STOP", "STOP_COPY -> STOP"
	{MigStateRunningP2P, MigStateStop, MigrationP2P, 0},
	{MigStateStopCopy, MigStateStop, 0, 0},
	// "RESUMING -> STOP"
	{MigStateResuming, MigStateStop, 0, 0},
	// "PRE_COPY -> RUNNING", "RUNNING_P2P -> RUNNING"
	{MigStatePreCopy, MigStateRunning, MigrationPreCopy, 0},
	{MigStateRunningP2P, MigStateRunning, MigrationP2P, 0},
	// "PRE_COPY_P2P -> RUNNING_P2P", "RUNNING -> RUNNING_P2P", "STOP -> RUNNING_P2P"
	{MigStatePreCopyP2P, MigStateRunningP2P, MigrationP2P | MigrationPreCopy, 0},
	{MigStateRunning, MigStateRunningP2P, MigrationP2P, 0},
	{MigStateStop, MigStateRunningP2P, MigrationP2P, 0},
	// "RUNNING -> PRE_COPY", "RUNNING_P2P -> PRE_COPY_P2P", "STOP -> STOP_COPY"
	{MigStateRunning, MigStatePreCopy, MigrationPreCopy, 0},
	{MigStateRunningP2P, MigStatePreCopyP2P, MigrationP2P | MigrationPreCopy, 0},
	{MigStateStop, MigStateStopCopy, 0, 0},
	// "PRE_COPY -> PRE_COPY_P2P", "PRE_COPY_P2P -> PRE_COPY"
	{MigStatePreCopy, MigStatePreCopyP2P, MigrationP2P | MigrationPreCopy, 0},
	{MigStatePreCopyP2P, MigStatePreCopy, MigrationP2P | MigrationPreCopy, 0},
	// "PRE_COPY_P2P -> STOP_COPY"
	{MigStatePreCopyP2P, MigStateStopCopy, MigrationP2P | MigrationPreCopy, 0},
	// "STOP -> RESUMING"
	{MigStateStop, MigStateResuming, 0, 0},
	// Without P2P: RUNNING -> STOP, STOP -> RUNNING, PRE_COPY -> STOP_COPY.
	{MigStateRunning, MigStateStop, 0, MigrationP2P},
	{MigStateStop, MigStateRunning, 0, MigrationP2P},
	{MigStatePreCopy, MigStateStopCopy, MigrationPreCopy, MigrationP2P},
}

// MigArc reports whether from -> to is a single arc of the FSM for a device
// with these migration flags.
func MigArc(from, to MigState, flags uint64) bool {
	for _, a := range migArcs {
		if a.from == from && a.to == to && a.present(flags) {
			return true
		}
	}
	return false
}

func (a migArc) present(flags uint64) bool {
	return flags&a.needs == a.needs && flags&a.unless == 0 &&
		migStateSupported(a.from, flags) && migStateSupported(a.to, flags)
}

// NextHop returns the first arc's end state on the way from cur to target
// for a device with migration flags features; NextHop(cur, cur, f) is cur.
// The path is the shortest one over the device's arcs whose interior avoids
// the saving group (vfio.h: "The path cannot have saving group states as
// interior arcs, only starting/end states"), except that a path from one
// saving state to another stays inside the group, so its data transfer
// session goes on (vfio_main.c walks PRE_COPY -> PRE_COPY_P2P -> STOP_COPY).
// ERROR, a state the features do not include, a device without
// MigrationStopCopy and a target with no such path (STOP_COPY -> PRE_COPY)
// give an error wrapping ErrInvalid.
func NextHop(cur, target MigState, features uint64) (MigState, error) {
	switch {
	case !migStateSupported(cur, features):
		return cur, fmt.Errorf("%w: migration from state %s with flags %#x", ErrInvalid, cur, features)
	case !migStateSupported(target, features):
		return cur, fmt.Errorf("%w: migration to state %s with flags %#x", ErrInvalid, target, features)
	case cur == target:
		return cur, nil
	}
	inGroup := cur.saving() && target.saving()
	// Breadth-first from cur; first[s] is the first hop of the shortest path
	// to s found so far.
	var first [numMigStates]MigState
	var seen [numMigStates]bool
	seen[cur] = true
	frontier := []MigState{cur}
	for len(frontier) > 0 {
		var next []MigState
		for _, s := range frontier {
			if s != cur && (s.saving() != inGroup) {
				continue // no path goes on through s
			}
			for _, a := range migArcs {
				if a.from != s || seen[a.to] || !a.present(features) {
					continue
				}
				seen[a.to] = true
				first[a.to] = first[s]
				if s == cur {
					first[a.to] = a.to
				}
				if a.to == target {
					return first[a.to], nil
				}
				next = append(next, a.to)
			}
		}
		frontier = next
	}
	return cur, fmt.Errorf("%w: no migration path from %s to %s with flags %#x", ErrInvalid, cur, target, features)
}

// ErrMigStateLost is what a Migrator returns (wrapped) when it could neither
// complete a request nor stay in a valid state: the server then moves the
// FSM to ERROR, which only DEVICE_RESET leaves (vfio.h "any -> ERROR"). The
// reply's errno is the device's own if its error carries one, else EIO.
var ErrMigStateLost = errors.New("vfio: device lost its migration state")
