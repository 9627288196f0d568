package gpuproc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/gtt"
)

// The wire format between gmigd (the client) and a GPU worker (the
// server), on a connected unix stream socket: frames of an 8-byte header
// and a payload, every integer little-endian. A frame's payload is a Msg
// whose fields, in a fixed order per operation and direction, the layout
// table (layouts) lists. docs/nvidia.md "Isolation" describes it.

// Header is every frame's first 8 bytes.
type Header struct {
	Len  uint32 // payload bytes that follow (at most MaxPayload)
	Kind Kind
	Op   Op
	_    uint16 // zero
}

// HeaderSize is Header's size on the wire.
const HeaderSize = 8

// MaxPayload bounds a frame's payload (1 GiB): a header announcing more is
// malformed, so a corrupt length never makes the reader allocate it.
const MaxPayload = 1 << 30

// Kind says what a frame is.
type Kind uint8

const (
	// KindCall is a request the server answers with one KindReply or
	// KindError, after any KindLanded frames the call caused.
	KindCall Kind = iota + 1
	// KindPost is a request with no answer (LAUNCH_GRID): its failure is
	// answered by the next call on the connection (a KindError wrapping
	// engine.ErrLaunchFailed).
	KindPost
	// KindReply is a call's result (the op's reply layout).
	KindReply
	// KindError is a call's failure (errorLayout).
	KindError
	// KindLanded tells the client of a window range a write-back just
	// stored (landedLayout), before the reply of the call that caused it.
	KindLanded
)

// Op is the operation a request asks for (the reply carries the same).
type Op uint8

// Operations: engine.Backend's, then nvidia.VGPUBackend's (the engine
// connection), then those the side connection serves (the worker's
// statistics, model writes and the migration's local-memory reader, which
// run beside the engine).
const (
	OpOpen Op = iota + 1
	OpCopy
	OpFill
	OpWrite
	OpRead
	OpSaxpy
	OpStencil
	OpRender
	OpSync
	OpLoadModule
	OpUnloadModule
	OpLaunchModule
	OpLaunchModuleParams
	OpLaunchGrid
	OpPlace
	OpPlaceLocal
	OpLoadLocal
	OpClose
	OpStats
	OpModelWrite
	OpTrackerOpen
	OpTrackerSnapshot
	OpTrackerChanged
	OpTrackerRead
	OpTrackerClose
	OpLanded // KindLanded frames' op
	// The bulk buffer's operations (bulk.go): the bytes lie in the bulk
	// buffer, the frame names where (fBulk).
	OpWriteBulk
	OpReadBulk
	OpLoadLocalBulk
	OpTrackerSnapshotBulk
	OpTrackerReadBulk
	OpTrackerChangedIn      // the local tracker's ChangedIn: A the first page, B the count
	OpTrackerReadHashedBulk // the local tracker's ReadHashed into the bulk buffer: the pages' hashes in the reply
	opCount
)

// Msg is every frame's payload, decoded: each operation uses the fields
// its layout names. Slices of a decoded Msg alias the frame's buffer.
type Msg struct {
	Dst, Src []gtt.Extent
	A, B, C  uint32
	X, Y     uint64
	Words    []uint64
	Data     []byte
	Str      string
	Grid     engine.Grid
	Bulk     Span
}

// Span is a byte range of the bulk buffer (bulk.go): on the wire, u64
// offset and u64 length, inside the region of the op's connection.
type Span struct{ Off, Len uint64 }

// field is one Msg field on the wire.
type field uint8

const (
	fDst   field = iota + 1 // u32 count, then count × (u64 off, u64 len)
	fSrc                    // as fDst
	fA                      // u32
	fB                      // u32
	fC                      // u32
	fX                      // u64
	fY                      // u64
	fWords                  // u32 count, then count × u64
	fData                   // u32 length, then the bytes
	fStr                    // u32 length, then the bytes
	fGrid                   // 7 × u32: X, Y, Z, BlockX, BlockY, BlockZ, SharedBytes
	fBulk                   // u64 offset, u64 length: a Span of the op's connection's bulk region
)

// layout is an operation's request and reply fields, in wire order.
type layout struct {
	name     string
	req, rep []field
	side     bool // served on the side connection
}

// layouts is the protocol, by Op. Requests:
//   - Open: A GPU ordinal, B flags (1: guest modules), X window offset,
//     Y local size, Str the vGPU's name; reply X device-address base,
//     Y mirror base, Data the GPU's cuda.DeviceInfo as JSON.
//   - Copy..Render, LoadModule..Place: engine.Backend's arguments (Saxpy:
//     X n, A a's bits, Src x, Dst y; LoadModule: C handle, B the module's
//     handle, A its LAUNCH arguments, Str entry, Data PTX).
//   - PlaceLocal: X address; reply X the base it is at.
//   - LoadLocal: Words the pages, Data their bytes in list order.
//   - Stats: reply Words, NVIDIAStats' counters in declaration order.
//   - TrackerSnapshot: A first page, B pages; reply Data.
//   - TrackerRead: Words pages; reply Data. TrackerChanged: reply Words.
//   - The bulk ops are their namesakes with Data in the bulk buffer at
//     Bulk: WriteBulk and LoadLocalBulk read it, ReadBulk,
//     TrackerSnapshotBulk and TrackerReadBulk fill it (their replies
//     carry nothing).
var layouts = [opCount]layout{
	OpOpen:                  {"open", []field{fA, fB, fX, fY, fStr}, []field{fX, fY, fData}, false},
	OpCopy:                  {"copy", []field{fDst, fSrc}, nil, false},
	OpFill:                  {"fill", []field{fDst, fA}, nil, false},
	OpWrite:                 {"write", []field{fDst, fData}, nil, false},
	OpRead:                  {"read", []field{fSrc, fX}, []field{fData}, false},
	OpSaxpy:                 {"saxpy", []field{fX, fA, fSrc, fDst}, nil, false},
	OpStencil:               {"stencil", []field{fA, fB, fSrc, fDst}, nil, false},
	OpRender:                {"render", []field{fA, fB, fX, fDst}, nil, false},
	OpSync:                  {"sync", nil, nil, false},
	OpLoadModule:            {"load-module", []field{fC, fB, fA, fStr, fData}, nil, false},
	OpUnloadModule:          {"unload-module", []field{fC}, nil, false},
	OpLaunchModule:          {"launch-module", []field{fC, fWords}, []field{fDst}, false},
	OpLaunchModuleParams:    {"launch-module-params", []field{fC, fX, fData}, []field{fDst}, false},
	OpLaunchGrid:            {"launch-grid", []field{fC, fGrid, fData}, nil, false},
	OpPlace:                 {"place", []field{fX}, []field{fX}, false},
	OpPlaceLocal:            {"place-local", []field{fX}, []field{fX}, false},
	OpLoadLocal:             {"load-local", []field{fWords, fData}, nil, false},
	OpClose:                 {"close", nil, nil, false},
	OpStats:                 {"stats", nil, []field{fWords}, true},
	OpModelWrite:            {"model-write", []field{fX, fData}, nil, true},
	OpTrackerOpen:           {"tracker-open", nil, []field{fA}, true},
	OpTrackerSnapshot:       {"tracker-snapshot", []field{fA, fB}, []field{fData}, true},
	OpTrackerChanged:        {"tracker-changed", nil, []field{fWords}, true},
	OpTrackerRead:           {"tracker-read", []field{fWords}, []field{fData}, true},
	OpTrackerClose:          {"tracker-close", nil, nil, true},
	OpLanded:                {"landed", nil, nil, false},
	OpWriteBulk:             {"write-bulk", []field{fDst, fBulk}, nil, false},
	OpReadBulk:              {"read-bulk", []field{fSrc, fBulk}, nil, false},
	OpLoadLocalBulk:         {"load-local-bulk", []field{fWords, fBulk}, nil, false},
	OpTrackerSnapshotBulk:   {"tracker-snapshot-bulk", []field{fA, fB, fBulk}, nil, true},
	OpTrackerReadBulk:       {"tracker-read-bulk", []field{fWords, fBulk}, nil, true},
	OpTrackerChangedIn:      {"tracker-changed-in", []field{fA, fB}, []field{fWords}, true},
	OpTrackerReadHashedBulk: {"tracker-read-hashed-bulk", []field{fWords, fBulk}, []field{fWords}, true},
}

// errorLayout is a KindError payload: A the sentinel bits (errBits), B a
// sticky CUDA code (engine.StickyCode; 0 for none), Str the message.
var errorLayout = []field{fA, fB, fStr}

// landedLayout is a KindLanded payload: X the window offset, Y the length.
var landedLayout = []field{fX, fY}

func (o Op) String() string {
	if o > 0 && o < opCount {
		return layouts[o].name
	}
	return fmt.Sprintf("op %d", uint8(o))
}

// ErrMalformed reports a frame that does not decode: the connection's peer
// is not speaking this protocol, or a bug; the server answers it with an
// error and the client gives the worker up.
var ErrMalformed = errors.New("gpuproc: malformed frame")

// fieldsOf returns the fields of a frame's payload by its kind and op.
func fieldsOf(h Header) ([]field, error) {
	if h.Op == 0 || h.Op >= opCount {
		return nil, fmt.Errorf("%w: unknown op %d", ErrMalformed, h.Op)
	}
	switch h.Kind {
	case KindCall, KindPost:
		if h.Op == OpLanded {
			return nil, fmt.Errorf("%w: a request for op %s", ErrMalformed, h.Op)
		}
		return layouts[h.Op].req, nil
	case KindReply:
		return layouts[h.Op].rep, nil
	case KindError:
		return errorLayout, nil
	case KindLanded:
		if h.Op != OpLanded {
			return nil, fmt.Errorf("%w: landed frame with op %s", ErrMalformed, h.Op)
		}
		return landedLayout, nil
	}
	return nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, h.Kind)
}

// DecodeHeader decodes and checks a frame header.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d-byte header", ErrMalformed, len(b))
	}
	h := Header{Len: binary.LittleEndian.Uint32(b), Kind: Kind(b[4]), Op: Op(b[5])}
	if pad := binary.LittleEndian.Uint16(b[6:]); pad != 0 {
		return h, fmt.Errorf("%w: header padding %#x", ErrMalformed, pad)
	}
	if h.Len > MaxPayload {
		return h, fmt.Errorf("%w: %d-byte payload (at most %d)", ErrMalformed, h.Len, MaxPayload)
	}
	if _, err := fieldsOf(h); err != nil {
		return h, err
	}
	return h, nil
}

// DecodeFrame decodes a whole frame (header and payload, nothing after).
func DecodeFrame(b []byte) (Header, Msg, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return h, Msg{}, err
	}
	if uint64(len(b)-HeaderSize) != uint64(h.Len) {
		return h, Msg{}, fmt.Errorf("%w: %d payload bytes after a header announcing %d", ErrMalformed, len(b)-HeaderSize, h.Len)
	}
	fs, _ := fieldsOf(h)
	m, err := decodeMsg(b[HeaderSize:], fs, regionOf(h.Op))
	if err != nil {
		return h, m, fmt.Errorf("%s %s: %w", kindName(h.Kind), h.Op, err)
	}
	return h, m, nil
}

func kindName(k Kind) string {
	switch k {
	case KindCall:
		return "call"
	case KindPost:
		return "post"
	case KindReply:
		return "reply"
	case KindError:
		return "error"
	case KindLanded:
		return "landed"
	}
	return fmt.Sprintf("kind %d", k)
}

// appendFrame appends the frame of m (kind, op) to b.
func appendFrame(b []byte, k Kind, op Op, m *Msg) []byte {
	h := Header{Kind: k, Op: op}
	fs, err := fieldsOf(h)
	if err != nil {
		panic(err) // a bug: the caller names the frame
	}
	start := len(b)
	b = append(b, make([]byte, HeaderSize)...)
	b = appendMsg(b, fs, m)
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-HeaderSize))
	b[start+4], b[start+5] = byte(k), byte(op)
	return b
}

func appendMsg(b []byte, fs []field, m *Msg) []byte {
	le := binary.LittleEndian
	xs := func(b []byte, xs []gtt.Extent) []byte {
		b = le.AppendUint32(b, uint32(len(xs)))
		for _, x := range xs {
			b = le.AppendUint64(le.AppendUint64(b, x.Off), x.Len)
		}
		return b
	}
	for _, f := range fs {
		switch f {
		case fDst:
			b = xs(b, m.Dst)
		case fSrc:
			b = xs(b, m.Src)
		case fA:
			b = le.AppendUint32(b, m.A)
		case fB:
			b = le.AppendUint32(b, m.B)
		case fC:
			b = le.AppendUint32(b, m.C)
		case fX:
			b = le.AppendUint64(b, m.X)
		case fY:
			b = le.AppendUint64(b, m.Y)
		case fWords:
			b = le.AppendUint32(b, uint32(len(m.Words)))
			for _, w := range m.Words {
				b = le.AppendUint64(b, w)
			}
		case fData:
			b = append(le.AppendUint32(b, uint32(len(m.Data))), m.Data...)
		case fStr:
			b = append(le.AppendUint32(b, uint32(len(m.Str))), m.Str...)
		case fGrid:
			g := m.Grid
			for _, v := range []uint32{g.X, g.Y, g.Z, g.BlockX, g.BlockY, g.BlockZ, g.SharedBytes} {
				b = le.AppendUint32(b, v)
			}
		case fBulk:
			b = le.AppendUint64(le.AppendUint64(b, m.Bulk.Off), m.Bulk.Len)
		}
	}
	return b
}

// decoder reads a payload, remembering the first shortfall.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %s needs %d bytes, %d left", ErrMalformed, what, n, len(d.b))
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u32(what string) uint32 {
	if p := d.take(4, what); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if p := d.take(8, what); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// count reads a u32 count of items of size bytes each, refusing one the
// rest of the payload cannot hold.
func (d *decoder) count(size uint64, what string) int {
	n := uint64(d.u32(what))
	if d.err == nil && n*size > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %d %s of %d bytes in %d bytes", ErrMalformed, n, what, size, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) extents(what string) []gtt.Extent {
	n := d.count(16, what)
	if n == 0 {
		return nil
	}
	out := make([]gtt.Extent, n)
	for i := range out {
		out[i] = gtt.Extent{Off: d.u64(what), Len: d.u64(what)}
		if out[i].Len > math.MaxUint64-out[i].Off && d.err == nil {
			d.err = fmt.Errorf("%w: %s extent [%#x, +%#x) wraps", ErrMalformed, what, out[i].Off, out[i].Len)
		}
	}
	return out
}

// span reads a Span, refusing one that is not inside region.
func (d *decoder) span(region Span) Span {
	s := Span{Off: d.u64("bulk offset"), Len: d.u64("bulk length")}
	if d.err == nil && (s.Off < region.Off || s.Off-region.Off > region.Len || s.Len > region.Len-(s.Off-region.Off)) {
		d.err = fmt.Errorf("%w: bulk span [%#x, +%#x) outside the connection's region [%#x, +%#x)",
			ErrMalformed, s.Off, s.Len, region.Off, region.Len)
	}
	return s
}

// decodeMsg decodes a payload of fields fs; a Span must lie in region.
func decodeMsg(p []byte, fs []field, region Span) (Msg, error) {
	d := decoder{b: p}
	var m Msg
	for _, f := range fs {
		switch f {
		case fDst:
			m.Dst = d.extents("destination extents")
		case fSrc:
			m.Src = d.extents("source extents")
		case fA:
			m.A = d.u32("A")
		case fB:
			m.B = d.u32("B")
		case fC:
			m.C = d.u32("C")
		case fX:
			m.X = d.u64("X")
		case fY:
			m.Y = d.u64("Y")
		case fWords:
			if n := d.count(8, "words"); n > 0 {
				m.Words = make([]uint64, n)
				for i := range m.Words {
					m.Words[i] = d.u64("words")
				}
			}
		case fData:
			m.Data = d.take(uint64(d.count(1, "data bytes")), "data")
		case fStr:
			m.Str = string(d.take(uint64(d.count(1, "string bytes")), "string"))
		case fGrid:
			g := &m.Grid
			for _, v := range []*uint32{&g.X, &g.Y, &g.Z, &g.BlockX, &g.BlockY, &g.BlockZ, &g.SharedBytes} {
				*v = d.u32("grid")
			}
		case fBulk:
			m.Bulk = d.span(region)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d bytes after the last field", ErrMalformed, len(d.b))
	}
	return m, d.err
}

// frameReader reads frames from a connection into a reused buffer,
// through a read buffer: a burst of posted frames costs one read(2).
type frameReader struct {
	r   io.Reader
	buf []byte
}

// newFrameReader reads frames from r.
func newFrameReader(r io.Reader) frameReader {
	return frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next reads one frame; the Msg aliases the reader's buffer until the
// next call.
func (fr *frameReader) next() (Header, Msg, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(fr.r, hb[:]); err != nil {
		return Header{}, Msg{}, err
	}
	h, err := DecodeHeader(hb[:])
	if err != nil {
		return h, Msg{}, err
	}
	if cap(fr.buf) < int(h.Len) {
		fr.buf = make([]byte, h.Len)
	}
	p := fr.buf[:h.Len]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		return h, Msg{}, fmt.Errorf("gpuproc: reading a %d-byte %s payload: %w", h.Len, h.Op, err)
	}
	fs, _ := fieldsOf(h)
	m, err := decodeMsg(p, fs, regionOf(h.Op))
	if err != nil {
		return h, m, payloadError{fmt.Errorf("%s %s: %w", kindName(h.Kind), h.Op, err)}
	}
	return h, m, nil
}

// payloadError is a frame whose header was good and whose payload did not
// decode: the connection is still in step, and the request can be
// answered with the error.
type payloadError struct{ error }

func (e payloadError) Unwrap() error { return e.error }
