package gtt

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gmig-dev/gmig/abi"
)

// Errors callers branch on. A refused Write wraps one of ErrIndex,
// ErrReserved or ErrOutOfRange; a failed Resolve wraps ErrFault (as a
// *FaultError naming the graphics address).
var (
	ErrIndex      = errors.New("gtt: index beyond the table")
	ErrReserved   = errors.New("gtt: reserved entry bits set")
	ErrOutOfRange = errors.New("gtt: page beyond graphics memory")
	ErrFault      = errors.New("gtt: page fault")
	ErrState      = errors.New("gtt: saved state does not fit this table")
	ErrConfig     = errors.New("gtt: invalid table geometry")
)

// maxPages is the largest graphics memory an entry can address: the page
// number field is bits 12..51 (docs/device-abi.md §3.1).
const maxPages = abi.GTTPageMask>>abi.GTTPageShift + 1

// shadow entries hold the host pool byte offset of the page (page aligned)
// in the page-number bits and the guest entry's flag bits below it; 0 is
// unmapped.
const shadowOffMask = ^uint64(abi.PageSize - 1)

// Table is one vGPU's guest GTT and its shadow.
type Table struct {
	entries  uint32
	pages    uint64 // graphics memory pages: valid entries name pages below it
	local    uint64 // device-local pages (ABI 1.2): GTTLocal entries name pages below it
	reserved uint64 // the entry bits that must be 0

	mu     sync.RWMutex
	base   uint64   // pool byte offset of graphics page 0
	guest  []uint64 // what the guest wrote, as it reads it back
	shadow []uint64 // host byte offset | flags, or 0 when unmapped
}

// New makes a table of entries entries (1..abi.GTTMaxEntries), all 0, for a
// vGPU whose graphics memory is pages pages (at least 1) starting at pool
// byte offset base (page aligned).
func New(entries uint32, base uint64, pages uint64) (*Table, error) {
	return NewWithLocal(entries, base, pages, 0)
}

// NewWithLocal is New for a vGPU that also has local pages pages of
// device-local memory (docs/device-abi.md §1.3, ABI 1.2) right after its
// graphics memory in the pool: local page p is at pool byte offset
// base + (pages+p)*4096. With local > 0, entries with abi.GTTLocal name
// local pages; with local == 0 the table is New's, bit 2 reserved.
func NewWithLocal(entries uint32, base, pages, local uint64) (*Table, error) {
	if entries == 0 || entries > abi.GTTMaxEntries {
		return nil, fmt.Errorf("%w: %d entries, want 1..%d", ErrConfig, entries, abi.GTTMaxEntries)
	}
	if pages == 0 || pages > maxPages {
		return nil, fmt.Errorf("%w: %d pages, want 1..%d", ErrConfig, pages, uint64(maxPages))
	}
	if local > maxPages {
		return nil, fmt.Errorf("%w: %d local pages, at most %d", ErrConfig, local, uint64(maxPages))
	}
	if err := checkBase(base, pages+local); err != nil {
		return nil, err
	}
	reserved := uint64(abi.GTTReservedMask)
	if local > 0 {
		reserved = abi.GTTReservedMaskLocalMem
	}
	return &Table{
		entries:  entries,
		pages:    pages,
		local:    local,
		reserved: reserved,
		base:     base,
		guest:    make([]uint64, entries),
		shadow:   make([]uint64, entries),
	}, nil
}

// checkBase reports whether a partition of pages pages fits at base.
func checkBase(base, pages uint64) error {
	if base%abi.PageSize != 0 {
		return fmt.Errorf("%w: base %#x not page aligned", ErrConfig, base)
	}
	if size := pages * abi.PageSize; base+size < base {
		return fmt.Errorf("%w: base %#x + %d pages overflows", ErrConfig, base, pages)
	}
	return nil
}

// Entries is the number of GTT entries.
func (t *Table) Entries() uint32 { return t.entries }

// Pages is the number of graphics memory pages valid entries may name.
func (t *Table) Pages() uint64 { return t.pages }

// LocalPages is the number of device-local pages valid abi.GTTLocal
// entries may name (0: the vGPU has none, bit 2 is reserved).
func (t *Table) LocalPages() uint64 { return t.local }

// Base is the pool byte offset of graphics page 0.
func (t *Table) Base() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.base
}

// check validates entry for index as docs/device-abi.md §3.1 says.
func (t *Table) check(index uint32, entry uint64) error {
	if index >= t.entries {
		return fmt.Errorf("%w: index %d of %d", ErrIndex, index, t.entries)
	}
	if entry&t.reserved != 0 {
		return fmt.Errorf("%w: entry %d = %#x", ErrReserved, index, entry)
	}
	if entry&abi.GTTValid != 0 {
		page, limit, what := entry>>abi.GTTPageShift, t.pages, "page"
		if entry&abi.GTTLocal != 0 {
			limit, what = t.local, "local page"
		}
		if page >= limit {
			return fmt.Errorf("%w: entry %d = %#x names %s %d of %d", ErrOutOfRange, index, entry, what, page, limit)
		}
	}
	return nil
}

// shadowOf is the shadow entry for a checked guest entry at base: an
// aperture page at base + page*4096, a local page after the graphics
// memory's pages.
func (t *Table) shadowOf(base, entry uint64) uint64 {
	if entry&abi.GTTValid == 0 {
		return 0
	}
	page := (entry & abi.GTTPageMask) >> abi.GTTPageShift
	if entry&abi.GTTLocal != 0 {
		page += t.pages
	}
	return (base + page*abi.PageSize) | entry&abi.GTTFlagsMask
}

// Write sets entry index to entry after checking it (docs/device-abi.md
// §3.1). An entry with reserved bits set, or valid and naming a page beyond
// graphics memory, is refused; an entry with VALID clear and no reserved
// bits is always accepted (it unmaps the page). On error nothing changes.
func (t *Table) Write(index uint32, entry uint64) error {
	if err := t.check(index, entry); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.guest[index] = entry
	t.shadow[index] = t.shadowOf(t.base, entry)
	return nil
}

// Read returns entry index as the guest last successfully wrote it.
func (t *Table) Read(index uint32) (uint64, error) {
	if index >= t.entries {
		return 0, fmt.Errorf("%w: index %d of %d", ErrIndex, index, t.entries)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.guest[index], nil
}

// rebuildLocked recomputes every shadow entry from the guest entries.
func (t *Table) rebuildLocked() {
	for i, e := range t.guest {
		t.shadow[i] = t.shadowOf(t.base, e)
	}
}

// Reset sets every entry to 0 (unmapped), as a device reset does.
func (t *Table) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.guest)
	clear(t.shadow)
}

// MappedPages lists, ascending and without repeats, the graphics memory
// pages that some valid entry maps (only writable mappings when write is
// set): the aperture pages commands can read, or write. Local pages are
// not among them.
func (t *Table) MappedPages(write bool) []uint64 {
	want := uint64(abi.GTTValid)
	if write {
		want |= abi.GTTWritable
	}
	t.mu.RLock()
	var pages []uint64
	for _, e := range t.guest {
		if e&want == want && e&abi.GTTLocal == 0 {
			pages = append(pages, (e&abi.GTTPageMask)>>abi.GTTPageShift)
		}
	}
	t.mu.RUnlock()
	slices.Sort(pages)
	return slices.Compact(pages)
}
