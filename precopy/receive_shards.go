package precopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/gmig-dev/gmig/precopy/stream"
)

// The destination's side of the stop phase on several streams (shards.go):
// at the stop Meta, once every pre-copy page is stored, the extra streams
// are taken (Options.NextStream) and read at once, each on its own
// goroutine, straight into the vGPU's memory, beside the main stream. One
// claim over the stop phase's pages is shared by every stream's reader, so
// a page that comes twice in the phase (on two streams, or twice on one)
// is refused before it is written. The device is restored only once every
// stream has ended.

// maxShardBlob bounds a shard stream's blob sections: it has none (its
// ShardHeader is read as a fixed-size section).
const maxShardBlob = 1

// shardsIn is one Receive's extra streams.
type shardsIn struct {
	wg      sync.WaitGroup
	fail    context.CancelCauseFunc // ends the Receive with the first stream's error
	claimed []atomic.Uint64         // one bit per page: sent in the stop phase
	taken   []atomic.Bool           // one per stream index: arrived
	pages   atomic.Uint64           // page records received on the extra streams
	zeros   atomic.Uint64
	bytes   atomic.Uint64
	counted bool // waitShards added the pages to the report

	mu  sync.Mutex
	err error // the first stream's error
}

// claim marks page p received in the stop phase; false if it already was.
func (in *shardsIn) claim(p uint32) bool {
	word, bit := &in.claimed[p/64], uint64(1)<<(p%64)
	return word.Or(bit)&bit == 0
}

func (in *shardsIn) setErr(err error) {
	in.mu.Lock()
	if in.err == nil {
		in.err = err
	}
	in.mu.Unlock()
	in.fail(err)
}

// failed is the first extra stream's error, if any.
func (in *shardsIn) failed() error {
	if in == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err
}

// startShards takes the stop Meta m's extra streams and starts reading
// them; r is the main stream's reader.
func (d *dest) startShards(ctx context.Context, r *stream.Reader, m meta) error {
	switch {
	case m.Streams == 0:
		return nil
	case m.Streams < 2 || m.Streams > stream.MaxShards:
		return fmt.Errorf("precopy: the stop Meta announces %d streams (want 2 … %d)", m.Streams, stream.MaxShards)
	case d.nextStream == nil:
		return fmt.Errorf("precopy: the source spreads the stop phase over %d streams; this destination takes at most 1", m.Streams)
	case m.Streams > d.maxStreams:
		return fmt.Errorf("precopy: the source spreads the stop phase over %d streams; this destination takes at most %d",
			m.Streams, d.maxStreams)
	}
	// Pre-copy pages still being stored must not land over a stop-phase
	// page of another stream.
	if err := r.Wait(); err != nil {
		return fmt.Errorf("precopy: %w", err)
	}
	mem := d.v.DeviceMemory() // local pages come on the first stream, and are claimed too
	in := &shardsIn{fail: d.cancel, claimed: make([]atomic.Uint64, (len(mem)/stream.PageSize+63)/64),
		taken: make([]atomic.Bool, m.Streams)}
	d.shards = in
	r.SetClaim(d.claim(in))
	for range m.Streams - 1 {
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			// An error after ctx ended is the end's echo (the main
			// stream failed, or another extra stream did first).
			if err := d.readShard(ctx, m, mem); err != nil && ctx.Err() == nil {
				in.setErr(err)
			}
		}()
	}
	d.log.Debug().Int("streams", m.Streams).Msg("stop phase on several streams")
	return nil
}

// readShard takes the next extra stream and reads it into mem.
func (d *dest) readShard(ctx context.Context, m meta, mem []byte) error {
	in := d.shards
	conn, err := d.nextStream(ctx)
	if err != nil {
		return fmt.Errorf("precopy: the stop phase's extra streams: %w", err)
	}
	stop := watch(ctx, conn)
	defer stop()
	r, err := stream.NewReader(conn, stream.Limits{MaxBlob: maxShardBlob})
	if err != nil {
		return fmt.Errorf("precopy: an extra stream: %w", err)
	}
	sec, err := r.Next(nil)
	if err != nil {
		return fmt.Errorf("precopy: an extra stream: %w", err)
	}
	sh := sec.Shard
	switch {
	case sec.Type != stream.ShardHeader:
		return fmt.Errorf("precopy: an extra stream opens with %v, want ShardHeader", sec.Type)
	case sh.Token != m.ShardToken || sh.Count != m.Streams:
		return fmt.Errorf("precopy: extra stream %d of %d (token %#x) is not this migration's (%d streams, token %#x)",
			sh.Index, sh.Count, sh.Token, m.Streams, m.ShardToken)
	case in.taken[sh.Index].Swap(true):
		return fmt.Errorf("precopy: extra stream %d arrived twice", sh.Index)
	}
	r.SetClaim(d.claim(in))
	if d.local != nil {
		r.SetStored(d.local.stored) // its local pages go on to the GPU as they are stored
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		sec, err := r.Next(mem)
		if errors.Is(err, io.EOF) {
			in.bytes.Add(r.Stats().Bytes)
			return nil
		}
		if err != nil {
			return fmt.Errorf("precopy: extra stream %d: %w", sh.Index, err)
		}
		if sec.Type != stream.PageBatch {
			return fmt.Errorf("precopy: extra stream %d: a %v section (it carries pages only)", sh.Index, sec.Type)
		}
		in.pages.Add(uint64(sec.Pages))
		in.zeros.Add(uint64(sec.ZeroPages))
	}
}

// claim is in's shared claim, with the local sink's stop-phase claim (if
// any).
func (d *dest) claim(in *shardsIn) func(uint32) bool {
	if d.local == nil {
		return in.claim
	}
	return d.local.stopClaim(in.claim)
}

// waitShards waits until every extra stream has ended (or failed) and
// returns the first error; the first time, it adds their pages to the
// stop phase's.
func (d *dest) waitShards() error {
	in := d.shards
	if in == nil {
		return nil
	}
	in.wg.Wait()
	if err := in.failed(); err != nil {
		return err
	}
	if !in.counted {
		in.counted = true
		d.rep.Stop.DirtyPages += int(in.pages.Load())
	}
	return nil
}
