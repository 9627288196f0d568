package precopy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
)

// BenchmarkStopStreams times a 256 MiB stop-and-copy stop phase (every
// page random, every page in the downtime) over loopback on 1, 2, 4 and 8
// streams, plain TCP and TLS 1.3 (gmigd's mutual TLS without the client
// certificate): bytes per second of Stop, source and destination in this
// process (the whole of the vGPU's downtime but the VMM's terms).
func BenchmarkStopStreams(b *testing.B) {
	const mem = 256 << 20
	src, dst := migtest.RandomPair(b, mem)
	cert := selfSigned(b)
	for _, tr := range []struct {
		name string
		pair func(testing.TB) (net.Conn, net.Conn)
	}{
		{"tcp", migtest.TCPPair},
		{"tls", func(t testing.TB) (net.Conn, net.Conn) { return tlsPair(t, cert) }},
	} {
		for _, k := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("%s/streams=%d", tr.name, k), func(b *testing.B) {
				b.SetBytes(mem)
				for b.Loop() {
					b.StopTimer()
					ctx := context.Background()
					a, c := tr.pair(b)
					conns := make([]io.ReadWriter, k-1)
					next := make(chan io.Reader, k)
					for i := range conns {
						x, y := tr.pair(b)
						conns[i] = x
						next <- y
					}
					recv := receive(ctx, c, dst, Options{Log: migtest.Log, NextStream: func(context.Context) (io.Reader, error) { return <-next, nil }})
					s, err := NewSource(src, a, Options{Strategy: StopCopy, Log: migtest.Log})
					if err == nil {
						err = s.AddStreams(conns...)
					}
					if err == nil {
						err = s.Precopy(ctx)
					}
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					_, err = s.Stop(ctx)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					if r := <-recv; r.err != nil {
						b.Fatal(r.err)
					}
					s.Close()
					src.Resume()
					b.StartTimer()
				}
			})
		}
	}
}

// selfSigned is a certificate for 127.0.0.1 that the client below does
// not check (the cost measured is the channel's, not the handshake's).
func selfSigned(t testing.TB) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsPair is migtest.TCPPair with TLS 1.3 on it, handshake done.
func tlsPair(t testing.TB, cert tls.Certificate) (net.Conn, net.Conn) {
	a, b := migtest.TCPPair(t)
	cl := tls.Client(a, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	sv := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	done := make(chan error, 1)
	go func() { done <- sv.Handshake() }()
	if err := cl.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return cl, sv
}
