package precopy

import (
	"context"
	"fmt"
	"time"
)

// RoundResult is one live round after the first pass: what its scan found
// dirty and how long the scan and the re-send took.
type RoundResult struct {
	// Dirty is how many pages the scan found dirty (and the round re-sent).
	Dirty int
	// Interval is the time from the previous scan (or the end of the
	// first pass) to this one: the guest dirtied Dirty pages in it.
	Interval time.Duration
	Scan     time.Duration // the scan's wall time
	Send     time.Duration // the re-send's wall time
	Bytes    uint64        // stream bytes the round wrote
}

// Round runs one more live round after Precopy, while the VM runs: a dirty
// scan, then the re-send of every page it found (iterative's round, run
// on demand by a caller that wants the remainder at the stop smaller). It
// may be called any number of times after a successful Precopy and before
// Stop; on error the caller calls Rollback.
func (s *Source) Round(ctx context.Context) (RoundResult, error) {
	s.mu.Lock()
	switch {
	case s.state != srcLive:
		s.mu.Unlock()
		return RoundResult{}, fmt.Errorf("precopy: Round on a %s source", s.state)
	case !s.precopied:
		s.mu.Unlock()
		return RoundResult{}, fmt.Errorf("precopy: Round before Precopy")
	}
	// The background re-hash and a scan would both clear marks: the
	// rounds take over from it.
	if s.bgStop != nil {
		s.report.Precopy.Background = s.bgStop()
		s.bgStop = nil
	}
	s.mu.Unlock()
	stop := watch(ctx, s.conn)
	defer stop()
	start, before := time.Now(), s.w.Stats()
	r, err := s.round(ctx)
	after := s.w.Stats()
	r.Bytes = after.Bytes - before.Bytes
	s.mu.Lock()
	p := &s.report.Precopy
	p.Duration += time.Since(start)
	p.Pages += after.Pages - before.Pages
	p.ZeroPages += after.ZeroPages - before.ZeroPages
	p.Bytes += r.Bytes
	if err == nil {
		p.Rounds++
	}
	s.mu.Unlock()
	if err != nil {
		return r, s.fail(ctx, "pre-copy round", err)
	}
	s.log.Debug().Int("dirty", r.Dirty).Dur("interval", r.Interval).Dur("scan", r.Scan).
		Dur("send", r.Send).Msg("extra pre-copy round")
	return r, nil
}

// round scans and re-sends what the scan found dirty.
func (s *Source) round(ctx context.Context) (RoundResult, error) {
	dirty, r, err := s.scanRound(ctx)
	if err != nil {
		return r, err
	}
	t := time.Now()
	err = s.resend(ctx, dirty)
	r.Send = time.Since(t)
	return r, err
}

// scanRound is a live round's scan: the dirty pages, and the interval
// since the previous scan; live's iterative rounds and Round share it.
func (s *Source) scanRound(ctx context.Context) ([]int, RoundResult, error) {
	scanAt := time.Now()
	res, err := s.tr.Scan(ctx)
	if err != nil {
		return nil, RoundResult{}, err
	}
	r := RoundResult{Dirty: len(res.Dirty), Scan: res.Duration}
	if !s.lastScan.IsZero() {
		r.Interval = scanAt.Sub(s.lastScan)
	}
	s.lastScan = scanAt
	return res.Dirty, r, nil
}

// resend sends pages of running memory again, a stream batch at a time.
func (s *Source) resend(ctx context.Context, pages []int) error {
	for lo := 0; lo < len(pages); lo += liveBatch {
		if err := s.sendLive(ctx, pages[lo:min(lo+liveBatch, len(pages))]); err != nil {
			return err
		}
	}
	return nil
}
