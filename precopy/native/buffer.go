package native

import (
	"io"
	"sync"
)

// migBuffer carries a save's stream from its Source to MigDataRead. Writes
// wait while it holds limit bytes or more; reads take what there is.
type migBuffer struct {
	mu     sync.Mutex
	cond   sync.Cond
	data   []byte
	off    int // data[off:] is unread
	limit  int
	paused bool  // the live phase is over: a PRE_COPY read of an empty buffer returns 0
	err    error // once set, writes fail with it and reads return it after the data (io.EOF: complete)
}

func newMigBuffer(limit int) *migBuffer {
	b := &migBuffer{limit: limit}
	b.cond.L = &b.mu
	return b
}

// Write implements io.Writer for the Source.
func (b *migBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.err == nil && len(b.data)-b.off >= b.limit {
		b.cond.Wait()
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.off >= b.limit || b.off == len(b.data) { // amortized: at most limit bytes moved per limit read
		b.data = b.data[:copy(b.data, b.data[b.off:])]
		b.off = 0
	}
	b.data = append(b.data, p...)
	b.cond.Broadcast()
	return len(p), nil
}

// read fills p with what there is. With nothing there, it waits for data
// or the end, or (wait false) until the live phase is over, and then
// returns 0 and nil.
func (b *migBuffer) read(p []byte, wait bool) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.off == len(b.data) && b.err == nil && (wait || !b.paused) {
		b.cond.Wait()
	}
	if b.off < len(b.data) {
		n := copy(p, b.data[b.off:])
		b.off += n
		b.cond.Broadcast()
		return n, nil
	}
	return 0, b.err
}

func (b *migBuffer) pause() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.paused = true
	b.cond.Broadcast()
}

// finish ends the stream: io.EOF when err is nil. The first call counts.
func (b *migBuffer) finish(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return
	}
	if err == nil {
		err = io.EOF
	}
	b.err = err
	b.cond.Broadcast()
}

// drained reports whether the whole stream, End included, has been read.
func (b *migBuffer) drained() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err == io.EOF && b.off == len(b.data)
}

// unread returns the bytes not yet read and whether the stream is complete.
func (b *migBuffer) unread() (n uint64, finished bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return uint64(len(b.data) - b.off), b.err == io.EOF
}

// sink is a save's connection: NoVerdict never reads it.
type sink struct{ *migBuffer }

func (sink) Read([]byte) (int, error) { return 0, io.EOF }
