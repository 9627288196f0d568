package vfio

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// specArcs are the FSM arcs for each combination of migration flags, written
// out from the specifications rather than from migArcs: the non-P2P lists
// from vfio-user.rst "Direct State Transitions" (PRE_COPY arcs removed when
// "PRE_COPY is not supported"), the P2P lists from the arc headings of the
// linux/vfio.h comment.
var specArcs = map[uint64]string{
	MigrationStopCopy: "RUNNING>STOP STOP>RUNNING STOP>STOP_COPY STOP_COPY>STOP STOP>RESUMING RESUMING>STOP",
	MigrationStopCopy | MigrationPreCopy: "RUNNING>STOP STOP>RUNNING STOP>STOP_COPY STOP_COPY>STOP STOP>RESUMING RESUMING>STOP " +
		"RUNNING>PRE_COPY PRE_COPY>RUNNING PRE_COPY>STOP_COPY",
	MigrationStopCopy | MigrationP2P: "RUNNING>RUNNING_P2P RUNNING_P2P>RUNNING RUNNING_P2P>STOP STOP>RUNNING_P2P " +
		"STOP>STOP_COPY STOP_COPY>STOP STOP>RESUMING RESUMING>STOP",
	MigrationStopCopy | MigrationP2P | MigrationPreCopy: "RUNNING>RUNNING_P2P RUNNING_P2P>RUNNING RUNNING_P2P>STOP STOP>RUNNING_P2P " +
		"STOP>STOP_COPY STOP_COPY>STOP STOP>RESUMING RESUMING>STOP " +
		"RUNNING>PRE_COPY PRE_COPY>RUNNING RUNNING_P2P>PRE_COPY_P2P PRE_COPY_P2P>RUNNING_P2P " +
		"PRE_COPY>PRE_COPY_P2P PRE_COPY_P2P>PRE_COPY PRE_COPY_P2P>STOP_COPY",
}

func parseState(t *testing.T, name string) MigState {
	t.Helper()
	for s := range MigState(numMigStates) {
		if s.String() == name {
			return s
		}
	}
	t.Fatalf("no state %q", name)
	return 0
}

// parseArcs returns the arcs of a specArcs list as a set.
func parseArcs(t *testing.T, list string) map[[2]MigState]bool {
	arcs := map[[2]MigState]bool{}
	for _, a := range strings.Fields(list) {
		from, to, _ := strings.Cut(a, ">")
		arcs[[2]MigState{parseState(t, from), parseState(t, to)}] = true
	}
	return arcs
}

// oraclePath finds the path NextHop should walk, by a different method:
// every simple path from cur to target over arcs, kept when its interior
// obeys vfio.h's rule (no saving-group state inside, unless both ends are
// saving states and the path stays in the group), then the shortest, which
// must be unique. ok is false when there is none.
func oraclePath(t *testing.T, arcs map[[2]MigState]bool, cur, target MigState) (path []MigState, ok bool) {
	saving := func(s MigState) bool {
		return s == MigStatePreCopy || s == MigStatePreCopyP2P || s == MigStateStopCopy
	}
	if cur == target {
		return nil, true
	}
	var all [][]MigState
	var dfs func(p []MigState)
	dfs = func(p []MigState) {
		last := p[len(p)-1]
		if last == target {
			all = append(all, slices.Clone(p))
			return
		}
		for a := range arcs {
			if a[0] == last && !slices.Contains(p, a[1]) {
				dfs(append(p, a[1]))
			}
		}
	}
	dfs([]MigState{cur})
	var best [][]MigState
	for _, p := range all {
		inGroup := saving(cur) && saving(target)
		good := true
		for _, s := range p[1 : len(p)-1] {
			if saving(s) != inGroup {
				good = false
			}
		}
		switch {
		case !good:
		case best == nil || len(p) < len(best[0]):
			best = [][]MigState{p}
		case len(p) == len(best[0]):
			best = append(best, p)
		}
	}
	if len(best) > 1 {
		t.Fatalf("%s -> %s: %d shortest paths %v", cur, target, len(best), best)
	}
	if best == nil {
		return nil, false
	}
	return best[0][1:], true
}

// walk follows NextHop from cur to target, returning the states after each
// hop, or the error that stopped it.
func walk(cur, target MigState, features uint64) ([]MigState, error) {
	var path []MigState
	for range 2 * numMigStates {
		next, err := NextHop(cur, target, features)
		if err != nil {
			return path, err
		}
		if next == cur {
			return path, nil
		}
		if !MigArc(cur, next, features) {
			return path, fmt.Errorf("hop %s -> %s is not an arc", cur, next)
		}
		path = append(path, next)
		cur = next
	}
	return path, fmt.Errorf("no end after %v", path)
}

// TestNextHopEveryPair walks NextHop for every ordered pair of states (and
// one past the enum) under every combination of migration flags and
// compares the walk with the oracle over the specification's arc lists.
func TestNextHopEveryPair(t *testing.T) {
	for features, list := range specArcs {
		arcs := parseArcs(t, list)
		supported := map[MigState]bool{}
		for a := range arcs {
			supported[a[0]], supported[a[1]] = true, true
		}
		for cur := range MigState(numMigStates + 1) {
			for target := range MigState(numMigStates + 1) {
				name := fmt.Sprintf("flags %#x %s->%s", features, cur, target)
				if got := MigArc(cur, target, features); got != arcs[[2]MigState{cur, target}] {
					t.Errorf("%s: MigArc %v, spec %v", name, got, !got)
				}
				got, err := walk(cur, target, features)
				want, ok := oraclePath(t, arcs, cur, target)
				if !supported[cur] || !supported[target] {
					ok = false
				}
				switch {
				case !ok && err == nil:
					t.Errorf("%s: walked %v, want an error", name, got)
				case !ok && (len(got) != 0 || !errors.Is(err, ErrInvalid)):
					t.Errorf("%s: walked %v then %v, want ErrInvalid at once", name, got, err)
				case ok && err != nil:
					t.Errorf("%s: %v after %v, want %v", name, err, got, want)
				case ok && !slices.Equal(got, want):
					t.Errorf("%s: walked %v, want %v", name, got, want)
				}
			}
		}
	}
	for _, features := range []uint64{0, MigrationPreCopy, MigrationP2P} {
		for cur := range MigState(numMigStates) {
			for target := range MigState(numMigStates) {
				if _, err := NextHop(cur, target, features); !errors.Is(err, ErrInvalid) {
					t.Errorf("flags %#x without STOP_COPY %s->%s: %v", features, cur, target, err)
				}
			}
		}
	}
}

// TestNextHopDeviceTable checks the next hop for every pair under the flags
// gmig's device advertises (STOP_COPY|PRE_COPY), against a table written by
// hand from the vfio-user arc list ("-": refused).
func TestNextHopDeviceTable(t *testing.T) {
	const features = MigrationStopCopy | MigrationPreCopy
	// Columns: ERROR STOP RUNNING STOP_COPY RESUMING RUNNING_P2P PRE_COPY PRE_COPY_P2P.
	table := map[MigState]string{
		MigStateError:      "- - - - - - - -",
		MigStateStop:       "- STOP RUNNING STOP_COPY RESUMING - RUNNING -",
		MigStateRunning:    "- STOP RUNNING STOP STOP - PRE_COPY -",
		MigStateStopCopy:   "- STOP STOP STOP_COPY STOP - - -",
		MigStateResuming:   "- STOP STOP STOP RESUMING - STOP -",
		MigStateRunningP2P: "- - - - - - - -",
		MigStatePreCopy:    "- RUNNING RUNNING STOP_COPY RUNNING - PRE_COPY -",
		MigStatePreCopyP2P: "- - - - - - - -",
	}
	for cur, row := range table {
		for i, want := range strings.Fields(row) {
			target := MigState(i)
			next, err := NextHop(cur, target, features)
			switch {
			case want == "-" && err == nil:
				t.Errorf("%s->%s: next %s, want refused", cur, target, next)
			case want == "-" && next != cur:
				t.Errorf("%s->%s: refused but next %s, want %s", cur, target, next, cur)
			case want != "-" && (err != nil || next.String() != want):
				t.Errorf("%s->%s: next %s, %v; want %s", cur, target, next, err, want)
			}
		}
	}
}

// TestNextHopKernelCombinations checks the combination transitions that
// drivers/vfio/vfio_main.c lists for a device with every optional feature.
func TestNextHopKernelCombinations(t *testing.T) {
	const all = MigrationStopCopy | MigrationP2P | MigrationPreCopy
	paths := []string{
		"PRE_COPY PRE_COPY_P2P STOP_COPY",
		"PRE_COPY RUNNING RUNNING_P2P",
		"PRE_COPY RUNNING RUNNING_P2P STOP",
		"PRE_COPY RUNNING RUNNING_P2P STOP RESUMING",
		"PRE_COPY_P2P RUNNING_P2P RUNNING",
		"PRE_COPY_P2P RUNNING_P2P STOP",
		"PRE_COPY_P2P RUNNING_P2P STOP RESUMING",
		"RESUMING STOP RUNNING_P2P",
		"RESUMING STOP RUNNING_P2P PRE_COPY_P2P",
		"RESUMING STOP RUNNING_P2P RUNNING",
		"RESUMING STOP RUNNING_P2P RUNNING PRE_COPY",
		"RESUMING STOP STOP_COPY",
		"RUNNING RUNNING_P2P PRE_COPY_P2P",
		"RUNNING RUNNING_P2P STOP",
		"RUNNING RUNNING_P2P STOP RESUMING",
		"RUNNING RUNNING_P2P STOP STOP_COPY",
		"RUNNING_P2P RUNNING PRE_COPY",
		"RUNNING_P2P STOP RESUMING",
		"RUNNING_P2P STOP STOP_COPY",
		"STOP RUNNING_P2P PRE_COPY_P2P",
		"STOP RUNNING_P2P RUNNING",
		"STOP RUNNING_P2P RUNNING PRE_COPY",
		"STOP_COPY STOP RESUMING",
		"STOP_COPY STOP RUNNING_P2P",
		"STOP_COPY STOP RUNNING_P2P RUNNING",
	}
	for _, p := range paths {
		var states []MigState
		for _, n := range strings.Fields(p) {
			states = append(states, parseState(t, n))
		}
		got, err := walk(states[0], states[len(states)-1], all)
		if err != nil || !slices.Equal(got, states[1:]) {
			t.Errorf("%s: walked %v, %v", p, got, err)
		}
	}
	for _, target := range []MigState{MigStatePreCopy, MigStatePreCopyP2P} {
		if _, err := NextHop(MigStateStopCopy, target, all); !errors.Is(err, ErrInvalid) {
			t.Errorf("STOP_COPY -> %s: %v, want blocked", target, err)
		}
	}
}

func TestMigStateString(t *testing.T) {
	for s, want := range map[MigState]string{MigStateError: "ERROR", MigStateStopCopy: "STOP_COPY",
		MigStatePreCopyP2P: "PRE_COPY_P2P", 8: "MigState(8)"} {
		if got := s.String(); got != want {
			t.Errorf("%d: %q, want %q", uint32(s), got, want)
		}
	}
}
