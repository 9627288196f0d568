package stream

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

const benchPages = 64 << 20 / PageSize // a 64 MiB partition

func benchMem(b *testing.B, zeroFrac float64) ([]byte, []uint32) {
	b.Helper()
	return randMem(rand.New(rand.NewPCG(11, 12)), benchPages, zeroFrac), allPages(benchPages)
}

var zeroFracs = []struct {
	name string
	frac float64
}{{"zero0", 0}, {"zero50", 0.5}}

// sendAll writes a whole stream of every page of mem to w.
func sendAll(w io.Writer, idx []uint32, mem []byte) error {
	sw, err := NewWriter(w)
	if err != nil {
		return err
	}
	if _, err := sw.WritePages(idx, mem, nil); err != nil {
		return err
	}
	return sw.Close()
}

// receiveAll reads a whole stream into mem.
func receiveAll(r io.Reader, mem []byte) error {
	sr, err := NewReader(r, Limits{MaxPages: benchPages})
	if err != nil {
		return err
	}
	for {
		if _, err := sr.Next(mem); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// BenchmarkBuffer writes 64 MiB into a bytes.Buffer and reads it back;
// MB/s counts partition bytes, not wire bytes.
func BenchmarkBuffer(b *testing.B) {
	for _, z := range zeroFracs {
		b.Run(z.name, func(b *testing.B) {
			mem, idx := benchMem(b, z.frac)
			dst := make([]byte, len(mem))
			var buf bytes.Buffer
			buf.Grow(len(mem) + len(mem)/100)
			b.SetBytes(int64(len(mem)))
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := sendAll(&buf, idx, mem); err != nil {
					b.Fatal(err)
				}
				if err := receiveAll(&buf, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWrite and BenchmarkRead time each side alone.
func BenchmarkWrite(b *testing.B) {
	for _, z := range zeroFracs {
		b.Run(z.name, func(b *testing.B) {
			mem, idx := benchMem(b, z.frac)
			b.SetBytes(int64(len(mem)))
			b.ReportAllocs()
			for b.Loop() {
				if err := sendAll(io.Discard, idx, mem); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRead(b *testing.B) {
	for _, z := range zeroFracs {
		b.Run(z.name, func(b *testing.B) {
			mem, idx := benchMem(b, z.frac)
			var buf bytes.Buffer
			if err := sendAll(&buf, idx, mem); err != nil {
				b.Fatal(err)
			}
			dst := make([]byte, len(mem))
			b.SetBytes(int64(len(mem)))
			b.ReportAllocs()
			for b.Loop() {
				if err := receiveAll(bytes.NewReader(buf.Bytes()), dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pipeBench sends through a connection pair made by dial, writer and
// reader on their own goroutines as two gmigd would be.
func pipeBench(b *testing.B, dial func(b *testing.B) (net.Conn, net.Conn)) {
	for _, z := range zeroFracs {
		b.Run(z.name, func(b *testing.B) {
			mem, idx := benchMem(b, z.frac)
			dst := make([]byte, len(mem))
			b.SetBytes(int64(len(mem)))
			b.ReportAllocs()
			for b.Loop() {
				src, sink := dial(b)
				errc := make(chan error, 1)
				go func() {
					err := sendAll(src, idx, mem)
					src.Close()
					errc <- err
				}()
				if err := receiveAll(sink, dst); err != nil {
					b.Fatal(err)
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				sink.Close()
			}
		})
	}
}

func BenchmarkPipe(b *testing.B) {
	pipeBench(b, func(*testing.B) (net.Conn, net.Conn) { return net.Pipe() })
}

func BenchmarkTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Skip("no loopback TCP:", err)
	}
	defer ln.Close()
	pipeBench(b, func(b *testing.B) (net.Conn, net.Conn) {
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				b.Error(err)
			}
			accepted <- c
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		return c, <-accepted
	})
}

// BenchmarkTCPStop is BenchmarkTCP the way a stop phase sends and
// receives: pages whose hashes the scan computed, written straight from
// memory (no copy, no hash on the send path), and a reader that checks
// and stores pages on 4 goroutines while it reads.
func BenchmarkTCPStop(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Skip("no loopback TCP:", err)
	}
	defer ln.Close()
	for _, z := range zeroFracs {
		b.Run(z.name, func(b *testing.B) {
			mem, idx := benchMem(b, z.frac)
			hashes := make([]uint64, len(idx))
			for i, p := range idx {
				hashes[i] = hashOf(mem[int(p)*PageSize : (int(p)+1)*PageSize])
			}
			dst := make([]byte, len(mem))
			b.SetBytes(int64(len(mem)))
			b.ReportAllocs()
			for b.Loop() {
				accepted := make(chan net.Conn, 1)
				go func() {
					c, _ := ln.Accept()
					accepted <- c
				}()
				src, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				sink := <-accepted
				errc := make(chan error, 1)
				go func() {
					sw, err := NewWriter(src)
					if err == nil {
						_, err = sw.WritePages(idx, mem, hashes)
					}
					if err == nil {
						err = sw.Close()
					}
					src.Close()
					errc <- err
				}()
				sr, err := NewReader(sink, Limits{MaxPages: benchPages})
				if err != nil {
					b.Fatal(err)
				}
				sr.SetWorkers(4)
				for {
					if _, err := sr.Next(dst); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				sink.Close()
			}
		})
	}
}
