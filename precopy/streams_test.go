package precopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// streamsMem is the vGPU of the stop-phase-on-many-streams tests: 4 MiB,
// 1024 pages, so that stop-and-copy and the dirtied pages below fill
// several 256-page batches.
const streamsMem = 4 << 20

// countConn counts what is written on a connection.
type countConn struct {
	net.Conn
	n atomic.Int64
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

// streamPairs is k−1 extra connections: the source's ends (counting) and
// a NextStream that hands out the destination's.
func streamPairs(t testing.TB, k int) ([]*countConn, func(context.Context) (io.Reader, error)) {
	var src []*countConn
	dst := make(chan io.Reader, k)
	for range k - 1 {
		a, b := migtest.TCPPair(t)
		src = append(src, &countConn{Conn: a})
		dst <- b
	}
	return src, func(ctx context.Context) (io.Reader, error) {
		select {
		case c := <-dst:
			return c, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// dirtyMany rewrites n pages of v's memory, as the guest's CPU would
// through the aperture.
func dirtyMany(mem []byte, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 5))
	for _, p := range rng.Perm(len(mem) / abi.PageSize)[:n] {
		page := mem[p*abi.PageSize : (p+1)*abi.PageSize]
		for i := 0; i < len(page); i += 64 {
			page[i] = byte(rng.Uint32())
		}
	}
}

// TestStopOnStreams migrates a vGPU with its stop phase on 1, 2 and 4
// streams — pipelined and serial one-shot with many pages dirtied while
// it runs, and stop-and-copy — over loopback TCP: the destination's memory
// digest and state equal the source's, both sides count the same stop
// pages, and every extra stream carried pages of its own.
func TestStopOnStreams(t *testing.T) {
	for _, k := range []int{1, 2, 4} {
		for _, c := range []struct {
			name   string
			strat  Strategy
			serial bool
		}{{"oneshot", OneShot, false}, {"oneshot-serial", OneShot, true}, {"stopcopy", StopCopy, false}} {
			t.Run(fmt.Sprintf("%s/%d", c.name, k), func(t *testing.T) {
				testStopOnStreams(t, k, c.strat, c.serial)
			})
		}
	}
}

func testStopOnStreams(t *testing.T, k int, strat Strategy, serial bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pa, pb := migtest.NewPool(t, 16<<20), migtest.NewPool(t, 16<<20)
	_ = migtest.NewVGPU(t, pb, "filler", 4<<20)
	src := migtest.NewDev(t, pa, "src", streamsMem, 1)
	src.FillMemory(2)
	dst := migtest.NewVGPU(t, pb, "dst", streamsMem)

	s, recv, extra := startOnStreams(ctx, t, src.V, dst, k, Options{Strategy: strat, Workers: PipelineMinWorkers, SerialStop: serial, Log: migtest.Log})
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	opened := make([]int64, len(extra))
	for i, c := range extra {
		opened[i] = c.n.Load()
	}
	src.RunWhileLive(3)
	dirtyMany(src.V.Memory(), 700, uint64(k))
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := <-recv
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got, want := xxhash.Sum64(dst.Memory()), xxhash.Sum64(src.V.Memory()); got != want || !bytes.Equal(dst.Memory(), src.V.Memory()) {
		t.Fatalf("destination memory digest %#x, source %#x", got, want)
	}
	want, err := src.V.Save()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dst.Save(); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("restored state differs (%v)", err)
	}
	if rep.Stop.DirtyPages < 700 || r.rep.Stop.DirtyPages != rep.Stop.DirtyPages {
		t.Errorf("stop phase: source %d pages, destination %d", rep.Stop.DirtyPages, r.rep.Stop.DirtyPages)
	}
	for i, c := range extra {
		// A batch of pages is more than the stream's End.
		if sent := c.n.Load() - opened[i]; sent < stream.PageSize {
			t.Errorf("extra stream %d carried %d bytes in the stop phase: no pages", i+1, sent)
		}
	}
	if pages, _ := s.Sent(); pages < uint64(rep.Stop.DirtyPages) {
		t.Errorf("Sent says %d pages, the stop phase alone sent %d", pages, rep.Stop.DirtyPages)
	}
}

// hostileShard writes, on a fresh connection, a shard stream: header,
// ShardHeader sh, then pages idx of mem (the source's, copied now: the
// writer outlives the source's turn), End.
func hostileShard(t *testing.T, sh stream.Shard, mem []byte, idx []uint32) io.Reader {
	a, b := migtest.TCPPair(t)
	mem = bytes.Clone(mem)
	done := make(chan struct{})
	t.Cleanup(func() {
		a.Close()
		<-done
	})
	go func() {
		defer close(done)
		w, err := stream.NewWriter(a)
		if err == nil {
			err = w.WriteShard(sh)
		}
		if err == nil {
			_, err = w.WritePages(idx, mem, nil)
		}
		if err == nil {
			err = w.Close()
		}
		_ = err // the destination may refuse and close first
	}()
	return b
}

// peekToken reads an extra stream's header and ShardHeader and returns
// its token.
func peekToken(t *testing.T, c io.Reader) uint64 {
	r, err := stream.NewReader(c, stream.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := r.Next(nil)
	if err != nil || sec.Type != stream.ShardHeader {
		t.Fatalf("extra stream opens with %v (%v)", sec.Type, err)
	}
	return sec.Shard.Token
}

// TestStreamsRefused: a destination refuses, and the source rolls back,
// when an extra stream is not this migration's (another token), names an
// index already taken, brings a page another stream brought, never
// comes, or is cut mid-stop; a destination without NextStream refuses a
// stop phase on several streams, naming the count.
func TestStreamsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		// hostile, if set, stands in for the first extra stream the
		// destination takes; sh is what the real one says.
		hostile func(t *testing.T, sh stream.Shard, mem []byte) io.Reader
		never   bool // the first extra stream never comes
		cut     bool // extra stream 1 is cut mid-stop
		noNext  bool // the destination has no NextStream
		mention string
	}{
		{name: "other migration", mention: "not this migration's",
			hostile: func(t *testing.T, sh stream.Shard, mem []byte) io.Reader {
				sh.Token++
				return hostileShard(t, sh, mem, []uint32{1})
			}},
		{name: "index twice", mention: "arrived twice",
			hostile: func(t *testing.T, sh stream.Shard, mem []byte) io.Reader {
				sh.Index = 2
				return hostileShard(t, sh, mem, nil)
			}},
		{name: "page twice", mention: "already received on another stream",
			hostile: func(t *testing.T, sh stream.Shard, mem []byte) io.Reader {
				return hostileShard(t, sh, mem, []uint32{0, 1, 2, 3, 4, 5, 6, 7})
			}},
		{name: "never comes", never: true, mention: "extra streams: context deadline exceeded"},
		// The destination sees the cut extra stream end, or the main
		// one that the source's roll-back ends: either fails it.
		{name: "cut mid-stop", cut: true},
		{name: "no NextStream", noNext: true, mention: "over 3 streams; this destination takes at most 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pa, pb := migtest.NewPool(t, 16<<20), migtest.NewPool(t, 16<<20)
			src := migtest.NewDev(t, pa, "src", streamsMem, 1)
			src.FillMemory(2)
			dst := migtest.NewVGPU(t, pb, "dst", streamsMem)
			a, b := migtest.TCPPair(t)
			extra, next := streamPairs(t, 3)
			var taken atomic.Int32
			opts := Options{Log: migtest.Log, NextStream: func(ctx context.Context) (io.Reader, error) {
				conn, err := next(ctx)
				if err != nil || taken.Add(1) > 1 {
					return conn, err
				}
				switch {
				case c.hostile != nil:
					sh := stream.Shard{Token: peekToken(t, conn), Index: 1, Count: 3}
					return c.hostile(t, sh, src.V.Memory()), nil
				case c.never:
					ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
					defer cancel()
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return conn, nil
			}}
			if c.noNext {
				opts.NextStream = nil
			}
			recv := receive(ctx, b, dst, opts)
			s, err := NewSource(src.V, a, Options{Strategy: StopCopy, Workers: PipelineMinWorkers, Log: migtest.Log})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var first io.ReadWriter = extra[0]
			if c.cut {
				first = &faultConn{Conn: extra[0], fault: func(off int64, p []byte, spans []span, f *follower) ([]byte, bool) {
					return nil, f.sections[stream.PageBatch] >= 1 && off > 64<<10
				}}
			}
			if err := s.AddStreams(first, extra[1]); err != nil {
				t.Fatal(err)
			}
			if err := s.Precopy(ctx); err != nil {
				t.Fatal(err)
			}
			_, serr := s.Stop(ctx)
			if serr == nil {
				t.Fatal("the source's stop phase succeeded")
			}
			s.Rollback()
			a.Close()
			r := <-recv
			if r.err == nil || !strings.Contains(r.err.Error(), c.mention) || !strings.HasPrefix(r.err.Error(), "precopy: ") ||
				c.cut && !strings.Contains(r.err.Error(), "unexpected EOF") {
				t.Fatalf("destination error %v, want one mentioning %q", r.err, c.mention)
			}
			if !c.cut && !errors.Is(serr, ErrRefused) {
				t.Errorf("source error %v, want the destination's refusal", serr)
			}
			if migtest.Quiesced(t, src.V) {
				t.Error("the source vGPU is still quiesced after Rollback")
			}
			t.Logf("destination: %v; source: %v", r.err, serr)
		})
	}
}

// startOnStreams starts a migration of src to dst over k loopback TCP
// streams (k-1 extra ones added to the source): the source (closed with
// the test), the destination's result and the extra streams' counters.
func startOnStreams(ctx context.Context, t testing.TB, src, dst *vgpu.VGPU, k int, opts Options) (*Source, <-chan received, []*countConn) {
	t.Helper()
	a, b := migtest.TCPPair(t)
	extra, next := streamPairs(t, k)
	recv := receive(ctx, b, dst, Options{NextStream: next, Log: migtest.Log})
	s, err := NewSource(src, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conns := make([]io.ReadWriter, len(extra))
	for i, c := range extra {
		conns[i] = c
	}
	if len(conns) > 0 {
		if err := s.AddStreams(conns...); err != nil {
			t.Fatal(err)
		}
	}
	return s, recv, extra
}
