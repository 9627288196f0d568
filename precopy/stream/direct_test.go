package stream

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

// Pages read from a socket go straight into the destination (readv), the
// Reader's buffer holding part of a batch and the rest arriving in pieces
// of any size, and come out as written; a page sent twice in one batch
// ends as its second copy; a page whose data changed on the way is
// refused.
func TestReadIntoSocket(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const pages = 700
	mem := randMem(rng, pages, 0.2)
	idx := make([]uint32, pages)
	for i, p := range rng.Perm(pages) {
		idx[i] = uint32(p)
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err == nil {
		_, err = w.WritePages(idx, mem, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	p7, p8 := filledPage(7), filledPage(8)
	buf.Write(frame(PageBatch, 0, batch(3, record(3, 0, hashOf(p7), p7), record(3, 0, hashOf(p8), p8), record(4, RecordZero, zeroHash, nil))))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(mem)
	copy(want[3*PageSize:], p8)
	clear(want[4*PageSize : 5*PageSize])

	got := make([]byte, len(mem))
	if err := readOverTCP(t, rng, buf.Bytes(), got); err != io.EOF {
		t.Fatalf("reading over TCP: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("pages read over TCP differ from those sent")
	}

	bad := bytes.Clone(buf.Bytes())
	at := bytes.Index(bad, mem[int(idx[pages/2])*PageSize:][:PageSize])
	if at < 0 || bytes.Equal(mem[int(idx[pages/2])*PageSize:][:PageSize], zeroPage[:]) {
		t.Fatal("a page sent was not found in the stream, or is zero")
	}
	bad[at+PageSize/2] ^= 0x10
	if err := readOverTCP(t, rng, bad, make([]byte, len(mem))); !errors.Is(err, ErrPageHash) {
		t.Fatalf("a page changed on the way: %v, want %v", err, ErrPageHash)
	}
}

// readOverTCP sends data over a loopback TCP connection in writes of
// random sizes and reads it into mem with a Reader, until an error (EOF
// after End).
func readOverTCP(t *testing.T, rng *rand.Rand, data, mem []byte) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	defer ln.Close()
	sizes := make([]int, 0, 64)
	for n := 0; n < len(data); {
		k := 1 + rng.IntN(64<<10)
		sizes = append(sizes, k)
		n += k
	}
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		rest := data
		for _, k := range sizes {
			k = min(k, len(rest))
			if _, err := c.Write(rest[:k]); err != nil {
				return
			}
			rest = rest[k:]
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := socketOf(c); !ok {
		t.Fatalf("a %T is not read with readv", c)
	}
	r, err := NewReader(c, Limits{})
	if err != nil {
		return err
	}
	for {
		if _, err := r.Next(mem); err != nil {
			return err
		}
	}
}
