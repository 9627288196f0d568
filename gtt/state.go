package gtt

import "fmt"

// State is the guest's view of the GTT: entry i is what the guest reads at
// index i. It is plain data; the host backing (base, shadow) is not part of
// it and is supplied by the table it is restored into.
type State struct {
	Entries []uint64
}

// Save returns a copy of the guest entries.
func (t *Table) Save() State {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return State{Entries: append([]uint64(nil), t.guest...)}
}

// Restore replaces the guest entries with s and rebuilds the shadow against
// this table's base. s must have exactly Entries() entries and each must pass
// the checks Write applies, against this table's page count; otherwise the
// error wraps ErrState (and the refusal) and the table is unchanged.
func (t *Table) Restore(s State) error {
	if len(s.Entries) != int(t.entries) {
		return fmt.Errorf("%w: %d entries, table has %d", ErrState, len(s.Entries), t.entries)
	}
	for i, e := range s.Entries {
		if err := t.check(uint32(i), e); err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	copy(t.guest, s.Entries)
	t.rebuildLocked()
	return nil
}
