package precopy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// Guest RAM the device wrote. The engine's DMA_FROM_GFX writes into the
// VM's RAM through the VMM's mappings; the VMM's own live migration tracks
// the guest CPU's writes, not the device's, so a page the engine wrote after
// the VMM sent it would arrive stale. The source therefore observes every
// guest-RAM range the engine writes from NewSource on, reads those ranges
// once the VM is paused and the engine quiesced (their contents are then
// final, CPU writes included), and sends them in GuestRAM sections; the
// destination writes them back into the VM's RAM after the VMM has loaded
// it and before the VM runs (GuestRAM.WriteTo).

// MaxGuestRAM bounds the guest RAM one migration carries: a destination
// refuses a stream with more, and a source whose engine wrote more fails
// its stop phase rather than send it in the downtime.
const MaxGuestRAM = 1 << 30

// guestRAMChunk is the largest GuestRAM section payload the source writes.
const guestRAMChunk = 1 << 20

// guestRAMRecord is a record's header: gpa u64, length u32.
const guestRAMRecord = 12

// ramSpan is the part of one guest page the engine wrote: [lo, hi).
type ramSpan struct{ lo, hi uint32 }

// ramWrites collects the guest-RAM ranges the engine writes, per page.
type ramWrites struct {
	mu    sync.Mutex
	pages map[uint64]ramSpan // guest page number -> written ramSpan
	bytes uint64             // sum of the spans
}

// note records that [gpa, gpa+n) was written; it is the vGPU's
// ObserveGuestWrites callback, on the engine goroutine.
func (w *ramWrites) note(gpa, n uint64) {
	if n == 0 || gpa+n < gpa {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pages == nil {
		w.pages = make(map[uint64]ramSpan)
	}
	for end := gpa + n; gpa < end; {
		pg, off := gpa/stream.PageSize, uint32(gpa%stream.PageSize)
		hi := uint32(min(end-pg*stream.PageSize, stream.PageSize))
		s, ok := w.pages[pg]
		if ok {
			w.bytes -= uint64(s.hi - s.lo)
			s.lo, s.hi = min(s.lo, off), max(s.hi, hi)
		} else {
			s = ramSpan{off, hi}
		}
		w.pages[pg] = s
		w.bytes += uint64(s.hi - s.lo)
		gpa = (pg + 1) * stream.PageSize
	}
}

// sorted returns the recorded pages in address order and the bytes they
// cover.
func (w *ramWrites) sorted() ([]uint64, map[uint64]ramSpan, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pgs := make([]uint64, 0, len(w.pages))
	for pg := range w.pages {
		pgs = append(pgs, pg)
	}
	slices.Sort(pgs)
	return pgs, w.pages, w.bytes
}

// sendGuestRAM reads the written ranges from guest RAM (the VM paused, the
// engine quiesced and no longer observed) and sends them; it returns the
// pages sent.
func (s *Source) sendGuestRAM() (int, error) {
	pgs, spans, total := s.ram.sorted()
	if len(pgs) == 0 {
		return 0, nil
	}
	if total > MaxGuestRAM {
		return 0, fmt.Errorf("precopy: the device wrote %d MiB of guest RAM during the migration, more than the %d MiB a migration carries", total>>20, MaxGuestRAM>>20)
	}
	buf := make([]byte, 0, guestRAMChunk+guestRAMRecord+stream.PageSize)
	for _, pg := range pgs {
		sp := spans[pg]
		gpa, n := pg*stream.PageSize+uint64(sp.lo), int(sp.hi-sp.lo)
		at := len(buf)
		buf = binary.LittleEndian.AppendUint64(buf, gpa)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(n))
		buf = slices.Grow(buf, n)[:len(buf)+n] // the bytes are read into it next
		if err := s.v.ReadGuest(buf[at+guestRAMRecord:], gpa); err != nil {
			return 0, fmt.Errorf("precopy: reading guest RAM the device wrote at %#x (%d bytes): %w", gpa, n, err)
		}
		if len(buf) >= guestRAMChunk {
			if err := s.w.WriteBlob(stream.GuestRAM, buf); err != nil {
				return 0, fmt.Errorf("sending %v: %w", stream.GuestRAM, err)
			}
			buf = buf[:0]
		}
	}
	if len(buf) > 0 {
		if err := s.w.WriteBlob(stream.GuestRAM, buf); err != nil {
			return 0, fmt.Errorf("sending %v: %w", stream.GuestRAM, err)
		}
	}
	return len(pgs), nil
}

// GuestRAM is the guest RAM the source's engine wrote during a migration,
// as it was when the VM stopped. The destination writes it into the VM's
// RAM after the VMM has loaded the VM and before the VM runs.
type GuestRAM struct {
	recs  []guestRAMRec
	bytes uint64
}

type guestRAMRec struct {
	gpa  uint64
	data []byte
}

// Ranges is how many ranges g holds (at most one per guest page).
func (g *GuestRAM) Ranges() int {
	if g == nil {
		return 0
	}
	return len(g.recs)
}

// Bytes is how many bytes of guest RAM g holds.
func (g *GuestRAM) Bytes() uint64 {
	if g == nil {
		return 0
	}
	return g.bytes
}

// WriteTo writes g into guest RAM through v's client mappings, in stream
// order. A nil g writes nothing.
func (g *GuestRAM) WriteTo(v *vgpu.VGPU) error {
	if g == nil {
		return nil
	}
	for _, r := range g.recs {
		if err := v.WriteGuest(r.data, r.gpa); err != nil {
			return fmt.Errorf("precopy: writing guest RAM the source's device wrote at %#x (%d bytes): %w", r.gpa, len(r.data), err)
		}
	}
	return nil
}

// errGuestRAM is a malformed GuestRAM section.
var errGuestRAM = errors.New("precopy: malformed GuestRAM section")

// add decodes one GuestRAM section payload into g; b is not retained. A
// malformed payload is refused whole: g keeps none of its records.
func (g *GuestRAM) add(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", errGuestRAM)
	}
	var recs []guestRAMRec
	total := g.bytes
	for off := 0; off < len(b); {
		if len(b)-off < guestRAMRecord {
			return fmt.Errorf("%w: %d bytes left at offset %d, a record header is %d", errGuestRAM, len(b)-off, off, guestRAMRecord)
		}
		gpa := binary.LittleEndian.Uint64(b[off:])
		n := uint64(binary.LittleEndian.Uint32(b[off+8:]))
		off += guestRAMRecord
		switch {
		case n == 0:
			return fmt.Errorf("%w: an empty range at %#x", errGuestRAM, gpa)
		case gpa%stream.PageSize+n > stream.PageSize:
			return fmt.Errorf("%w: the range at %#x (%d bytes) crosses a page", errGuestRAM, gpa, n)
		case uint64(len(b)-off) < n:
			return fmt.Errorf("%w: the range at %#x has %d bytes, the section %d", errGuestRAM, gpa, n, len(b)-off)
		case total+n > MaxGuestRAM:
			return fmt.Errorf("%w: more than %d MiB of guest RAM", errGuestRAM, MaxGuestRAM>>20)
		}
		recs = append(recs, guestRAMRec{gpa: gpa, data: b[off : off+int(n)]})
		total += n
		off += int(n)
	}
	for i := range recs {
		recs[i].data = slices.Clone(recs[i].data) // b is not retained
	}
	g.recs = append(g.recs, recs...)
	g.bytes = total
	return nil
}
