package dirty

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
)

// recordChunk is how many pages one worker records at a time; Record runs on
// the calling goroutine alone for at most this many pages.
const recordChunk = 64

// Record hashes the given pages now and stores each page's hash and samples
// as what the destination holds, clearing its engine and background marks
// first. It appends the hashes to dst, in the order of pages, and returns
// the extended slice (for the migration stream).
//
// The bytes sent for a page must be read after Record returns, so that a
// write racing with Record leaves the page dirty; RecordCopy removes the
// question by hashing the copy that is sent. Large sets are hashed on
// Options.Workers goroutines. An out-of-range page fails the whole call
// before anything is recorded.
func (t *Tracker) Record(pages []int, dst []uint64) ([]uint64, error) {
	if err := t.checkPages(pages); err != nil {
		return dst, err
	}
	n := len(dst)
	dst = slices.Grow(dst, len(pages))[:n+len(pages)]
	out := dst[n:]
	_ = t.forChunks(context.Background(), len(pages), recordChunk, t.workers, func(_, lo, hi int, buf []byte) {
		for i := lo; i < hi; i++ {
			out[i] = t.recordPage(pages[i], buf)
		}
	})
	return dst, nil
}

// RecordCopy is Record that also copies the pages, in order, into buf
// (PageSize bytes each) and records the hash of exactly those bytes; the
// caller sends buf. len(buf) must be at least len(pages)*PageSize.
func (t *Tracker) RecordCopy(pages []int, buf []byte, dst []uint64) ([]uint64, error) {
	if err := t.checkPages(pages); err != nil {
		return dst, err
	}
	if len(buf) < len(pages)*PageSize {
		return dst, fmt.Errorf("dirty: copy buffer of %d bytes is short of %d pages", len(buf), len(pages))
	}
	n := len(dst)
	dst = slices.Grow(dst, len(pages))[:n+len(pages)]
	out := dst[n:]
	_ = t.forChunks(context.Background(), len(pages), recordChunk, t.workers, func(_, lo, hi int, _ []byte) {
		for i := lo; i < hi; i++ {
			out[i] = t.recordPage(pages[i], buf[i*PageSize:(i+1)*PageSize])
		}
	})
	return dst, nil
}

// RecordAll records every page, on Options.Workers goroutines. If ctx ends
// first, the pages recorded so far stay recorded and the error says so.
func (t *Tracker) RecordAll(ctx context.Context) error {
	err := t.forChunks(ctx, t.pages, scanChunk, t.workers, func(_, lo, hi int, buf []byte) {
		for p := lo; p < hi; p++ {
			t.recordPage(p, buf)
		}
	})
	if err != nil {
		return fmt.Errorf("dirty: recording all pages: %w", err)
	}
	return nil
}

// recordPage makes page p's current bytes its recorded state and returns
// their hash: it clears the page's marks (the write log's too), copies the page into img and
// stores img's hash and samples. Clearing before copying means a write that
// the copy misses is marked again afterwards or changes the hash — the page
// can only end up dirty.
func (t *Tracker) recordPage(p int, img []byte) uint64 {
	t.engine.clear(p)
	t.background.clear(p)
	t.written.clear(p)
	copyPage(img, t.page(p))
	h := HashPage(img)
	t.hashes[p].Store(h)
	k := len(t.offsets)
	s := t.samples[p*k : (p+1)*k]
	for i, off := range t.offsets {
		s[i].Store(binary.NativeEndian.Uint64(img[off:]))
	}
	t.recorded.set(p)
	return h
}
