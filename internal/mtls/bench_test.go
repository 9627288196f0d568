package mtls

import (
	"context"
	"io"
	"testing"

	"github.com/gmig-dev/gmig/orchestrator"
)

// BenchmarkStream measures one connection's throughput over loopback in
// 1 MiB writes (the migration stream's batch size), plain TCP against
// mutual TLS: what the channel costs a migration's transfer terms.
func BenchmarkStream(b *testing.B) {
	for _, c := range benchTransports(b) {
		b.Run(c.name, func(b *testing.B) {
			l, err := c.dst.Listen("127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				s, err := l.Accept()
				if err != nil {
					return
				}
				defer s.Close()
				_, _ = io.Copy(io.Discard, s)
			}()
			conn, err := c.src.Dial(context.Background(), l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := conn.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDial measures a connection's set-up, TCP against mutual TLS
// (both certificates checked): a migration opens two before its VM pauses.
func BenchmarkDial(b *testing.B) {
	for _, c := range benchTransports(b) {
		b.Run(c.name, func(b *testing.B) {
			l, err := c.dst.Listen("127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				for {
					s, err := l.Accept()
					if err != nil {
						return
					}
					s.Close()
				}
			}()
			for b.Loop() {
				conn, err := c.src.Dial(context.Background(), l.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				conn.Close()
			}
		})
	}
}

// benchTransport is one side-by-side case: plain TCP or mutual TLS.
type benchTransport struct {
	name     string
	src, dst orchestrator.Transport
}

func benchTransports(b *testing.B) []benchTransport {
	pki := newTestPKI(b, "bench CA")
	var log logBuffer
	return []benchTransport{
		{"tcp", orchestrator.TCP{}, orchestrator.TCP{}},
		{"mtls", pki.transport(b, "src", &log, Options{}), pki.transport(b, "dst", &log, Options{})},
	}
}
