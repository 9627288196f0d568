package vfio

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// DMA logging: the device's own writes to client memory, logged for a VMM
// whose live migration must carry the pages the device dirtied
// (VFIO_DEVICE_FEATURE_DMA_LOGGING_START, _STOP and _REPORT). The device
// marks each write it makes into its DMALog; the server starts, stops and
// reports the log on the client's requests.

// DMALogger is what a Device implements to answer the DMA logging
// features; the server finds it with a type assertion. A device without it
// answers them with ENOTSUP, to a PROBE as well.
type DMALogger interface {
	// DMALog returns the log the device marks its DMA writes into; the
	// same one every time.
	DMALog() *DMALog
}

// DMALogPageSize is the granularity of a DMALog's marks: 4 KiB, the page
// size the server negotiates (VERSION "pgsizes", defaultPgSizes). START
// answers with it whatever page size the client hinted ("it's the
// driver's choice which page size to pick").
const DMALogPageSize = defaultPgSizes

// dmaLogMaxRanges bounds the ranges of one START, as linux's
// drivers/vfio/vfio_main.c LOG_MAX_RANGES does (E2BIG beyond).
const dmaLogMaxRanges = 256

// DMALog is the set of pages a device wrote since logging started or they
// were last reported. Mark is safe from any goroutine; the server drives
// the rest from its request goroutine.
type DMALog struct {
	on     atomic.Bool // Mark's fast path: nothing to do while off
	mu     sync.Mutex
	ranges []DMALoggingRange   // sorted by IOVA; empty: every write
	pages  map[uint64]struct{} // written DMALogPageSize pages (IOVA / DMALogPageSize)
}

// Mark records that the device wrote [iova, iova+n). Outside the logged
// ranges, or while logging is off, it does nothing.
func (l *DMALog) Mark(iova, n uint64) {
	if !l.on.Load() || n == 0 {
		return
	}
	end := iova + n
	if end < iova {
		end = ^uint64(0)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pages == nil {
		return // stopped meanwhile
	}
	for pg := iova / DMALogPageSize; pg <= (end-1)/DMALogPageSize; pg++ {
		if l.inRanges(pg*DMALogPageSize, DMALogPageSize) {
			l.pages[pg] = struct{}{}
		}
	}
}

// inRanges reports whether [a, a+n) meets a logged range.
func (l *DMALog) inRanges(a, n uint64) bool {
	if len(l.ranges) == 0 {
		return true
	}
	// The first range that ends after a; it meets [a, a+n) if it starts
	// before a+n.
	i, _ := slices.BinarySearchFunc(l.ranges, a, func(r DMALoggingRange, a uint64) int {
		if r.IOVA+r.Length <= a {
			return -1
		}
		return 1
	})
	return i < len(l.ranges) && l.ranges[i].IOVA < a+n
}

// Logging reports whether logging is on.
func (l *DMALog) Logging() bool { return l.on.Load() }

// start begins logging ranges (none: everything), with no page marked.
func (l *DMALog) start(ranges []DMALoggingRange) error {
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b DMALoggingRange) int { return cmp.Compare(a.IOVA, b.IOVA) })
	for i, r := range rs {
		switch {
		case r.Length == 0:
			return fmt.Errorf("%w: dma logging range at %#x of length 0", ErrInvalid, r.IOVA)
		case r.IOVA+r.Length < r.IOVA:
			return fmt.Errorf("%w: dma logging range at %#x of %#x bytes wraps", ErrInvalid, r.IOVA, r.Length)
		case i > 0 && rs[i-1].IOVA+rs[i-1].Length > r.IOVA:
			return fmt.Errorf("%w: dma logging ranges at %#x and %#x overlap", ErrInvalid, rs[i-1].IOVA, r.IOVA)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pages != nil {
		return fmt.Errorf("vfio: dma logging already started: %w", unix.EBUSY)
	}
	l.ranges, l.pages = rs, map[uint64]struct{}{}
	l.on.Store(true)
	return nil
}

// stop ends logging and forgets the marks; it reports whether logging was
// on.
func (l *DMALog) stop() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.pages != nil
	l.on.Store(false)
	l.ranges, l.pages = nil, nil
	return was
}

// report returns the bitmap of [iova, iova+length) in units of pageSize
// (a power of two, at least DMALogPageSize) and clears the marks of the
// pages wholly inside it (linux/vfio.h: "During querying the log is
// cleared for the IOVA range"); a page the range only partly covers stays
// marked for the report of its other part. The bitmap has at most
// maxWords u64 words (E2BIG beyond).
func (l *DMALog) report(iova, length, pageSize, maxWords uint64) ([]uint64, error) {
	switch {
	case length == 0:
		return nil, fmt.Errorf("%w: dma logging report of length 0", ErrInvalid)
	case iova+length < iova:
		return nil, fmt.Errorf("%w: dma logging report at %#x of %#x bytes wraps", ErrInvalid, iova, length)
	case pageSize < DMALogPageSize || bits.OnesCount64(pageSize) != 1:
		return nil, fmt.Errorf("%w: dma logging report page size %d (a power of two ≥ %d)", ErrInvalid, pageSize, DMALogPageSize)
	}
	nbits := (length-1)/pageSize + 1
	if words := (nbits-1)/64 + 1; words > maxWords {
		return nil, fmt.Errorf("%w: dma logging bitmap of %d bytes, at most %d", ErrTooBig, words*8, maxWords*8)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pages == nil {
		return nil, fmt.Errorf("%w: dma logging report while logging is off", ErrInvalid)
	}
	bitmap := make([]uint64, (nbits-1)/64+1)
	end := iova + length
	for pg := range l.pages {
		lo, hi := pg*DMALogPageSize, pg*DMALogPageSize+DMALogPageSize
		if hi <= iova || lo >= end {
			continue
		}
		first, last := (max(lo, iova)-iova)/pageSize, (min(hi, end)-1-iova)/pageSize
		for b := first; b <= last; b++ {
			bitmap[b/64] |= 1 << (b % 64)
		}
		if lo >= iova && hi <= end {
			delete(l.pages, pg)
		}
	}
	return bitmap, nil
}

// dmaLogFeature reports whether index is one of the DMA logging features.
func dmaLogFeature(index uint32) bool {
	return index == FeatureDMALoggingStart || index == FeatureDMALoggingStop || index == FeatureDMALoggingRep
}

// handleDMALogging answers a DEVICE_FEATURE request for a DMA logging
// feature, its flags already checked by handleDeviceFeature: START and
// STOP take SET (STOP's data, if any, is ignored: linux/vfio.h gives it
// none), REPORT takes GET; each may be probed.
func handleDMALogging(s *session, m *message, req DeviceFeatureMsg, getSet uint32) ([]byte, error) {
	index := req.Flags & DeviceFeatureMask
	dl, ok := s.srv.dev.(DMALogger)
	if !ok {
		return nil, fmt.Errorf("%w: device feature %d (the device does not log its DMA)", ErrUnsupported, index)
	}
	want := DeviceFeatureSet
	if index == FeatureDMALoggingRep {
		want = DeviceFeatureGet
	}
	if getSet&^want != 0 {
		return nil, fmt.Errorf("%w: device feature %d does not support flags %#x", ErrInvalid, index, getSet)
	}
	if req.Flags&DeviceFeatureProbe != 0 {
		return append(newFrame(len(m.payload)), m.payload...), nil
	}
	log, data := dl.DMALog(), m.payload[DeviceFeatureSize:]
	switch index {
	case FeatureDMALoggingStart:
		return s.dmaLogStart(log, m.payload, data)
	case FeatureDMALoggingStop:
		if log.stop() {
			s.log.Info().Msg("dma logging stopped")
		}
		return append(newFrame(len(m.payload)), m.payload...), nil
	}
	return s.dmaLogReport(log, req, data)
}

func (s *session) dmaLogStart(log *DMALog, payload, data []byte) ([]byte, error) {
	ctl, err := DecodeDMALoggingControl(data)
	if err != nil {
		return nil, err
	}
	if ctl.NumRanges > dmaLogMaxRanges {
		return nil, fmt.Errorf("%w: dma logging of %d ranges, at most %d", ErrTooBig, ctl.NumRanges, dmaLogMaxRanges)
	}
	need := DMALoggingControlSize + int(ctl.NumRanges)*DMALoggingRangeSize
	if len(data) < need {
		return nil, errShort("dma logging ranges", need, len(data))
	}
	ranges := make([]DMALoggingRange, ctl.NumRanges)
	for i := range ranges {
		ranges[i], _ = DecodeDMALoggingRange(data[DMALoggingControlSize+i*DMALoggingRangeSize:])
	}
	if err := log.start(ranges); err != nil {
		return nil, err
	}
	s.log.Info().Uint32("ranges", ctl.NumRanges).Uint64("page_size_hint", ctl.PageSize).Msg("dma logging started")
	reply := append(newFrame(len(payload)), payload...)
	ne.PutUint64(reply[HeaderSize+DeviceFeatureSize:], DMALogPageSize) // the page size chosen
	return reply, nil
}

func (s *session) dmaLogReport(log *DMALog, req DeviceFeatureMsg, data []byte) ([]byte, error) {
	rep, err := DecodeDMALoggingReport(data)
	if err != nil {
		return nil, err
	}
	bitmap, err := log.report(rep.IOVA, rep.Length, rep.PageSize, uint64(s.maxXfer)/8)
	if err != nil {
		return nil, err
	}
	full := DeviceFeatureSize + DMALoggingReportSize + 8*len(bitmap)
	if uint64(req.Argsz) < uint64(full) {
		return nil, fmt.Errorf("%w: dma logging report argsz %d below %d", ErrInvalid, req.Argsz, full)
	}
	frame := DeviceFeatureMsg{Argsz: uint32(full), Flags: req.Flags}.Append(newFrame(full))
	frame = rep.Append(frame)
	for _, w := range bitmap {
		frame = ne.AppendUint64(frame, w)
	}
	return frame, nil
}
