package gpuproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
)

// server is a GPU worker's side of the protocol: one back end, served on
// two connections, each by one goroutine (serve): the engine's calls in
// order on one, the side calls (statistics, model writes, a migration's
// local-memory reader, which nvidia.NVIDIA allows beside the engine) on
// the other. Every request is answered, a malformed one with an error;
// only a broken connection ends a loop.
type server struct {
	log    zerolog.Logger
	window []byte // the partition's aperture, mapped from its memfd
	bulk   []byte // the bulk buffer (BulkSize bytes), mapped from its memfd

	ready chan struct{} // closed once b is set (OpOpen)
	b     *nvidia.NVIDIA

	// Engine connection only (its goroutine).
	wbuf     []byte // the frames of the call in progress: landed ones, then the reply
	rbuf     []byte // Read's bytes
	deferred error  // a posted LAUNCH_GRID's failure, for the next call

	// Side connection only (its goroutine).
	sbuf []byte
	// Comparison connection only (its goroutine).
	cbuf []byte
	// The local tracker: opened and closed on the side connection, used on
	// it and on the comparison connection (trackerMu: read-locked while
	// in use, locked to open or close it).
	trackerMu sync.RWMutex
	tracker   nvidia.LocalReader

	closeOnce sync.Once
}

// handler serves one request; the reply is the op's reply layout.
type handler func(s *server, m *Msg) (Msg, error)

var handlers = [opCount]handler{
	OpOpen:  (*server).open,
	OpCopy:  func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.Copy(m.Dst, m.Src) },
	OpFill:  func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.Fill(m.Dst, m.A) },
	OpWrite: func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.Write(m.Dst, m.Data) },
	OpRead:  (*server).read,
	OpSaxpy: func(s *server, m *Msg) (Msg, error) {
		return Msg{}, s.b.Saxpy(m.X, math.Float32frombits(m.A), m.Src, m.Dst)
	},
	OpStencil:            func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.Stencil(m.A, m.B, m.Src, m.Dst) },
	OpRender:             func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.Render(m.A, m.B, m.X, m.Dst) },
	OpSync:               func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.Sync() },
	OpLoadModule:         (*server).loadModule,
	OpUnloadModule:       func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.UnloadModule(m.C) },
	OpLaunchModule:       (*server).launchModule,
	OpLaunchModuleParams: (*server).launchModuleParams,
	OpLaunchGrid:         func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.LaunchGrid(m.C, m.Grid, m.Data) },
	OpPlace:              (*server).place,
	OpPlaceLocal:         (*server).placeLocal,
	OpLoadLocal:          (*server).loadLocal,
	OpClose:              func(s *server, m *Msg) (Msg, error) { return Msg{}, s.close() },
	OpStats:              (*server).stats,
	OpModelWrite:         func(s *server, m *Msg) (Msg, error) { return Msg{}, s.b.ModelWrite(m.X, m.Data) },
	OpTrackerOpen:        (*server).trackerOpen,
	OpTrackerSnapshot:    (*server).trackerSnapshot,
	OpTrackerChanged:     (*server).trackerChanged,
	OpTrackerChangedIn:   (*server).trackerChangedIn,
	OpTrackerRead:        (*server).trackerRead,
	OpTrackerClose:       (*server).trackerClose,
	OpWriteBulk: func(s *server, m *Msg) (Msg, error) {
		b, err := s.bulkOf(m)
		if err != nil {
			return Msg{}, err
		}
		return Msg{}, s.b.Write(m.Dst, b)
	},
	OpReadBulk: func(s *server, m *Msg) (Msg, error) {
		b, err := s.bulkOf(m)
		if err != nil {
			return Msg{}, err
		}
		return Msg{}, s.b.Read(b, m.Src)
	},
	OpLoadLocalBulk:         (*server).loadLocalBulk,
	OpTrackerSnapshotBulk:   (*server).trackerSnapshotBulk,
	OpTrackerReadBulk:       (*server).trackerReadBulk,
	OpTrackerReadHashedBulk: (*server).trackerReadHashedBulk,
}

// connKind is which of a worker's connections a serve loop answers.
type connKind uint8

const (
	connEngine connKind = iota // the engine's calls, in order
	connSide                   // side calls (layout.side)
	connCmp                    // the local tracker's comparisons alone (cmpOp)
)

func (k connKind) String() string {
	return [...]string{"engine", "side", "comparison"}[k]
}

// cmpOp reports whether op goes on the comparison connection (and no
// other goes there): the local tracker's Changed and ChangedIn, which
// use no bulk region and run beside the side connection's reads.
func cmpOp(op Op) bool { return op == OpTrackerChanged || op == OpTrackerChangedIn }

// serve answers requests from r, writing to w, until r fails (the client
// closed, or after OpClose); kind says which connection it is.
func (s *server) serve(r io.Reader, w io.Writer, kind connKind) error {
	fr := newFrameReader(r)
	buf := &s.wbuf
	switch kind {
	case connSide:
		buf = &s.sbuf
	case connCmp:
		buf = &s.cbuf
	}
	side := kind != connEngine
	for {
		h, m, err := fr.next()
		if err != nil {
			if !errors.As(err, new(payloadError)) {
				return err // the connection is gone, or out of step
			}
		}
		if err == nil {
			err = s.check(h, kind)
		}
		var rep Msg
		if err == nil {
			rep, err = s.dispatch(h, &m, side)
		}
		if h.Kind == KindPost {
			if side { // refused by check: nothing to answer, nothing to defer
				s.log.Warn().Err(err).Msg("gpuproc: a post on the side connection")
				continue
			}
			if err != nil && s.deferred == nil {
				s.deferred = fmt.Errorf("gpuproc: %w: a posted %s failed: %w", engine.ErrLaunchFailed, h.Op, err)
			}
			continue
		}
		if err != nil {
			*buf = appendFrame(*buf, KindError, h.Op, ptr(errorMsg(err)))
		} else {
			*buf = appendFrame(*buf, KindReply, h.Op, &rep)
		}
		if _, err := w.Write(*buf); err != nil {
			return fmt.Errorf("gpuproc: answering %s: %w", h.Op, err)
		}
		*buf = (*buf)[:0] // (a post's landed frames, if any, wait for the next reply)
		if h.Op == OpClose {
			return nil
		}
	}
}

func ptr[T any](v T) *T { return &v }

// check refuses a request on the wrong connection or before the back end
// is open.
func (s *server) check(h Header, kind connKind) error {
	l := layouts[h.Op]
	side := kind != connEngine
	switch {
	case kind == connCmp && !cmpOp(h.Op):
		return fmt.Errorf("%w: %s on the %s connection", ErrMalformed, h.Op, kind)
	case h.Kind != KindCall && h.Kind != KindPost:
		return fmt.Errorf("%w: a %s frame from the client", ErrMalformed, kindName(h.Kind))
	case h.Kind == KindPost && h.Op != OpLaunchGrid:
		return fmt.Errorf("%w: %s posted (only launch-grid is)", ErrMalformed, h.Op)
	case l.side != side:
		return fmt.Errorf("%w: %s on the wrong connection", ErrMalformed, h.Op)
	case h.Op == OpOpen:
		if s.b != nil {
			return fmt.Errorf("%w: open twice", ErrMalformed)
		}
		return nil
	}
	if side {
		<-s.ready // side calls wait for the engine connection's open
	}
	if s.b == nil {
		return fmt.Errorf("%w: %s before open", ErrMalformed, h.Op)
	}
	return nil
}

// dispatch runs a request: on the engine connection, a posted failure is
// the answer of the call after it (Sync and Close run as well, and join
// it, as the in-process back end's Sync reports a kernel's failure and
// still writes back).
func (s *server) dispatch(h Header, m *Msg, side bool) (Msg, error) {
	switch h.Op {
	case OpTrackerOpen, OpTrackerClose:
		s.trackerMu.Lock()
		defer s.trackerMu.Unlock()
	case OpTrackerSnapshot, OpTrackerChanged, OpTrackerChangedIn, OpTrackerRead,
		OpTrackerSnapshotBulk, OpTrackerReadBulk, OpTrackerReadHashedBulk:
		s.trackerMu.RLock() // the side and comparison connections at once
		defer s.trackerMu.RUnlock()
	}
	if !side && s.deferred != nil && h.Kind == KindCall {
		err := s.deferred
		s.deferred = nil
		if h.Op != OpSync && h.Op != OpClose {
			return Msg{}, err
		}
		rep, err2 := handlers[h.Op](s, m)
		return rep, errors.Join(err, err2)
	}
	return handlers[h.Op](s, m)
}

// landed queues a write-back's range for the client ahead of the reply of
// the call in progress, which leaves with it in one write
// (nvidia.NVIDIAConfig.Landed runs on the engine connection's goroutine,
// inside the call).
func (s *server) landed(off, n uint64) {
	s.wbuf = appendFrame(s.wbuf, KindLanded, OpLanded, &Msg{X: off, Y: n})
}

func (s *server) open(m *Msg) (Msg, error) {
	g, err := nvidia.OpenGPU(int(m.A))
	if err != nil {
		return Msg{}, err
	}
	b, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{
		GPU:       g,
		Window:    s.window,
		WindowOff: m.X,
		LocalSize: m.Y,
		Modules:   m.B&openModules != 0,
		Landed:    s.landed,
		Bulk:      s.bulk, // page-locked: the local tracker and LoadLocal copy straight from and into it
		Log:       s.log,
	})
	if err != nil {
		return Msg{}, err
	}
	info, err := json.Marshal(b.Info())
	if err != nil {
		_ = b.Close()
		return Msg{}, err
	}
	s.b = b
	close(s.ready)
	s.log.Debug().Uint64("device_addr_base", b.DeviceAddrBase()).Uint64("local_size", m.Y).Msg("gpuproc: GPU worker ready")
	return Msg{X: b.DeviceAddrBase(), Y: b.MirrorBase(), Data: info}, nil
}

// openModules is OpOpen's flag bit for guest modules.
const openModules = 1

func (s *server) read(m *Msg) (Msg, error) {
	if m.X > MaxPayload {
		return Msg{}, fmt.Errorf("gpuproc: read of %d bytes (at most %d a call)", m.X, MaxPayload)
	}
	if uint64(cap(s.rbuf)) < m.X {
		s.rbuf = make([]byte, m.X)
	}
	dst := s.rbuf[:m.X]
	return Msg{Data: dst}, s.b.Read(dst, m.Src)
}

func (s *server) loadModule(m *Msg) (Msg, error) {
	return Msg{}, s.b.LoadModule(m.C, engine.Module{Handle: m.B, Entry: m.Str, PTX: append([]byte(nil), m.Data...), Args: m.A})
}

func (s *server) launchModule(m *Msg) (Msg, error) {
	xs, err := s.b.LaunchModule(m.C, m.Words)
	return Msg{Dst: xs}, err
}

func (s *server) launchModuleParams(m *Msg) (Msg, error) {
	xs, err := s.b.LaunchModuleParams(m.C, m.X, m.Data)
	return Msg{Dst: xs}, err
}

func (s *server) place(m *Msg) (Msg, error) {
	va, err := s.b.Place(m.X)
	return Msg{X: va}, err
}

func (s *server) placeLocal(m *Msg) (Msg, error) {
	err := s.b.PlaceLocal(m.X)
	return Msg{X: s.b.DeviceAddrBase()}, err
}

func (s *server) loadLocal(m *Msg) (Msg, error) {
	pages, err := pageList(m.Words)
	if err != nil {
		return Msg{}, err
	}
	return Msg{}, s.b.LoadLocalPacked(pages, m.Data)
}

// bulkOf is the bulk buffer's bytes at m.Bulk (the decoder checked that
// the span lies in the connection's region).
func (s *server) bulkOf(m *Msg) ([]byte, error) {
	if len(s.bulk) != BulkSize {
		return nil, fmt.Errorf("gpuproc: %w: a bulk span, and no bulk buffer", ErrMalformed)
	}
	return s.bulk[m.Bulk.Off : m.Bulk.Off+m.Bulk.Len : m.Bulk.Off+m.Bulk.Len], nil
}

// bulkPages is bulkOf for n pages: the span must hold exactly them.
func (s *server) bulkPages(m *Msg, n int) ([]byte, error) {
	b, err := s.bulkOf(m)
	if err == nil && uint64(len(b)) != uint64(n)*pageSize {
		err = fmt.Errorf("gpuproc: %w: %d pages in a %d-byte bulk span", ErrMalformed, n, len(b))
	}
	return b, err
}

// bulkPageList is m's page list and the bulk span that holds exactly
// those pages.
func (s *server) bulkPageList(m *Msg) ([]int, []byte, error) {
	pages, err := pageList(m.Words)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.bulkPages(m, len(pages))
	return pages, b, err
}

func (s *server) loadLocalBulk(m *Msg) (Msg, error) {
	pages, b, err := s.bulkPageList(m)
	if err != nil {
		return Msg{}, err
	}
	return Msg{}, s.b.LoadLocalPacked(pages, b)
}

// close releases the back end (OpClose, or the client gone).
func (s *server) close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.b != nil {
			err = s.b.Close()
		}
	})
	return err
}

func (s *server) stats(*Msg) (Msg, error) {
	st := s.b.Stats()
	return Msg{Words: []uint64{st.Commands, st.HostReadBytes, st.WriteBackBytes, st.GapBytes, st.SyncBytes, st.ModuleLaunches, st.HashedBytes}}, nil
}

func (s *server) trackerOpen(*Msg) (Msg, error) {
	if s.tracker != nil {
		return Msg{}, errors.New("gpuproc: a local tracker is open already")
	}
	t, err := s.b.NewLocalTracker()
	if err != nil {
		return Msg{}, err
	}
	s.tracker = t
	return Msg{A: uint32(t.Pages())}, nil
}

func (s *server) trackerCheck() error {
	if s.tracker == nil {
		return errors.New("gpuproc: no local tracker open")
	}
	return nil
}

func (s *server) trackerSnapshot(m *Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	if uint64(m.B)*pageSize > MaxPayload {
		return Msg{}, fmt.Errorf("gpuproc: snapshot of %d pages (at most %d a call)", m.B, MaxPayload/pageSize)
	}
	buf := make([]byte, int(m.B)*pageSize)
	return Msg{Data: buf}, s.tracker.Snapshot(int(m.A), int(m.B), buf)
}

func (s *server) trackerChanged(*Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	pages, err := s.tracker.Changed()
	words := make([]uint64, len(pages))
	for i, p := range pages {
		words[i] = uint64(p)
	}
	return Msg{Words: words}, err
}

func (s *server) trackerChangedIn(m *Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	pages, err := s.tracker.ChangedIn(int(m.A), int(m.B))
	words := make([]uint64, len(pages))
	for i, p := range pages {
		words[i] = uint64(p)
	}
	return Msg{Words: words}, err
}

func (s *server) trackerRead(m *Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	pages, err := pageList(m.Words)
	if err != nil {
		return Msg{}, err
	}
	if uint64(len(pages))*pageSize > MaxPayload {
		return Msg{}, fmt.Errorf("gpuproc: read of %d pages (at most %d a call)", len(pages), MaxPayload/pageSize)
	}
	buf := make([]byte, len(pages)*pageSize)
	return Msg{Data: buf}, s.tracker.Read(pages, buf)
}

func (s *server) trackerSnapshotBulk(m *Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	b, err := s.bulkPages(m, int(m.B))
	if err != nil {
		return Msg{}, err
	}
	return Msg{}, s.tracker.Snapshot(int(m.A), int(m.B), b)
}

func (s *server) trackerReadBulk(m *Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	pages, b, err := s.bulkPageList(m)
	if err != nil {
		return Msg{}, err
	}
	return Msg{}, s.tracker.Read(pages, b)
}

func (s *server) trackerReadHashedBulk(m *Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	pages, b, err := s.bulkPageList(m)
	if err != nil {
		return Msg{}, err
	}
	hr, ok := s.tracker.(nvidia.HashedReader)
	if !ok {
		return Msg{}, errors.New("gpuproc: the local tracker gives no hashes with its reads")
	}
	sums := make([]uint64, len(pages))
	if _, err := hr.ReadHashed(pages, b, sums); err != nil {
		return Msg{}, err
	}
	return Msg{Words: sums}, nil
}

func (s *server) trackerClose(*Msg) (Msg, error) {
	if err := s.trackerCheck(); err != nil {
		return Msg{}, err
	}
	err := s.tracker.Close()
	s.tracker = nil
	return Msg{}, err
}

// pageSize is a device-local page's size.
const pageSize = 4096

// pageList converts page numbers from the wire, refusing any no int holds
// (the back end checks them against its local memory).
func pageList(words []uint64) ([]int, error) {
	pages := make([]int, len(words))
	for i, w := range words {
		if w > math.MaxInt32 {
			return nil, fmt.Errorf("gpuproc: page number %d", w)
		}
		pages[i] = int(w)
	}
	return pages, nil
}
