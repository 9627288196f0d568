package precopy

import (
	"context"
	"time"

	"github.com/gmig-dev/gmig/dirty"
)

// Precopy is the live phase, while the VM runs. One-shot sends every page
// once, recording for each the hash of the very bytes sent, then (with
// BackgroundRate) starts the background re-hash that runs until Stop.
// Iterative does the same pass, then rounds of scan and re-send until a
// round finds at most ConvergePages dirty pages or MaxRounds rounds have
// run. Stop-and-copy sends nothing. It may be called once, before Stop; on
// error the caller calls Rollback.
func (s *Source) Precopy(ctx context.Context) error {
	if err := s.enter("Precopy", true); err != nil {
		return err
	}
	stop := watch(ctx, s.conn)
	defer stop()
	start, before := time.Now(), s.w.Stats()
	rounds, err := s.live(ctx)
	after := s.w.Stats()
	s.mu.Lock()
	p := &s.report.Precopy
	p.Duration, p.Rounds = time.Since(start), rounds
	p.Pages, p.ZeroPages, p.Bytes = after.Pages-before.Pages, after.ZeroPages-before.ZeroPages, after.Bytes-before.Bytes
	rep := *p
	s.mu.Unlock()
	if err != nil {
		return s.fail(ctx, "pre-copy", err)
	}
	if s.opts.Strategy == OneShot && s.opts.BackgroundRate > 0 {
		s.mu.Lock()
		s.bgStop = s.tr.StartBackground(context.Background(), s.opts.BackgroundRate)
		s.mu.Unlock()
	}
	s.log.Info().Dur("took", rep.Duration).Int("rounds", rounds).Uint64("pages", rep.Pages).
		Uint64("zero_pages", rep.ZeroPages).Uint64("bytes", rep.Bytes).Msg("pre-copy done")
	return nil
}

// live runs the strategy's live rounds and returns how many ran.
func (s *Source) live(ctx context.Context) (rounds int, err error) {
	if s.opts.Strategy == StopCopy {
		s.prepareLocalStop() // out of the downtime
		return 0, nil
	}
	if err := s.sendAllLive(ctx); err != nil {
		return 0, err
	}
	if s.local != nil {
		if err := s.sendLocalLive(ctx); err != nil {
			return 0, err
		}
	}
	rounds = 1
	s.lastScan = time.Now()
	for s.opts.Strategy == Iterative && rounds < s.opts.MaxRounds {
		dirty, r, err := s.scanRound(ctx)
		if err != nil {
			return rounds, err
		}
		s.log.Debug().Int("round", rounds+1).Int("dirty", r.Dirty).Dur("scan", r.Scan).Msg("pre-copy round")
		if r.Dirty <= s.opts.ConvergePages {
			break
		}
		if err := s.resend(ctx, dirty); err != nil {
			return rounds, err
		}
		rounds++
	}
	return rounds, nil
}

// sendAllLive sends every page once.
func (s *Source) sendAllLive(ctx context.Context) error {
	n := s.tr.Pages()
	for lo := 0; lo < n; lo += liveBatch {
		hi := min(lo+liveBatch, n)
		pages := s.pages[:hi-lo]
		for i := range pages {
			pages[i] = lo + i
		}
		if err := s.sendLive(ctx, pages); err != nil {
			return err
		}
	}
	return nil
}

// sendLive sends at most liveBatch pages of running memory: the tracker
// copies them, hashes the copies and records those hashes (clearing their
// engine and background marks before copying), and the stream sends the
// same copies with the same hashes. What the destination holds is thus
// exactly what was recorded, whatever the guest writes meanwhile: a page
// changed after its copy differs from its record, even if it changes back
// later (dirty/doc.go, "Correctness argument").
func (s *Source) sendLive(ctx context.Context, pages []int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	idx := s.idx[:len(pages)]
	for i, p := range pages {
		idx[i] = uint32(p)
	}
	var err error
	if s.hashes, err = s.tr.RecordCopy(pages, s.copies, s.hashes[:0]); err != nil {
		return err
	}
	_, err = s.w.WriteCopies(idx, s.copies[:len(pages)*dirty.PageSize], s.hashes)
	s.noteSent()
	return err
}
