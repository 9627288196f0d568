package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Defaults for Options.
const (
	// DefaultHandshakeTimeout bounds an accepted connection's handshake.
	// A handshake is two round trips and a few signatures: milliseconds.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultDialTimeout bounds a dial, TCP connect and handshake together.
	DefaultDialTimeout = 10 * time.Second
	// DefaultMaxHandshakes bounds the handshakes a listener runs at once.
	DefaultMaxHandshakes = 64
)

// ErrConfig is an unusable certificate, key or CA bundle.
var ErrConfig = errors.New("mtls: bad TLS configuration")

// Options tune a Transport.
type Options struct {
	HandshakeTimeout time.Duration // 0: DefaultHandshakeTimeout
	DialTimeout      time.Duration // 0: DefaultDialTimeout
	MaxHandshakes    int           // 0: DefaultMaxHandshakes
	// Log receives one line per connection: the peer's identity, or why
	// it was refused.
	Log zerolog.Logger
	// Time, if set, is the clock certificates are checked against.
	Time func() time.Time
}

func (o Options) withDefaults() Options {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxHandshakes <= 0 {
		o.MaxHandshakes = DefaultMaxHandshakes
	}
	return o
}

// Transport is the orchestrator's Transport over mutual TLS 1.3. Reload
// replaces its certificate and CA bundle: connections made after it use
// the new ones, connections already made keep theirs.
type Transport struct {
	cur  atomic.Pointer[identity]
	opts Options
}

// identity is one certificate and CA bundle as the two sides' TLS
// configurations; Reload swaps it whole.
type identity struct {
	server, client *tls.Config
	leaf           *x509.Certificate
	bundle         []byte // the CA bundle as read (nil: made by New)
}

// Leaf returns this host's own certificate (the one Reload last loaded).
func (t *Transport) Leaf() *x509.Certificate { return t.cur.Load().leaf }

// Load reads f (this host's certificate and key, the CA bundle) and
// returns a Transport that presents that certificate and accepts peers
// whose certificates chain to the bundle. It refuses a certificate that
// does not itself chain to the bundle for both uses or has expired: a
// configuration that can only fail later fails now. A key file readable by
// others than its owner is logged as a warning (the path and mode only).
func Load(f Files, o Options) (*Transport, error) {
	o = o.withDefaults()
	id, err := loadIdentity(f, o)
	if err != nil {
		return nil, err
	}
	t := &Transport{opts: o}
	t.cur.Store(id)
	return t, nil
}

// Reload reads f again, with Load's checks, and makes it the identity of
// every later Dial and handshake of t's listeners; connections already
// made keep theirs. On error t is unchanged.
func (t *Transport) Reload(f Files) error {
	id, err := loadIdentity(f, t.opts)
	if err != nil {
		return err
	}
	t.cur.Store(id)
	return nil
}

// loadIdentity is Load's reading and checking of f.
func loadIdentity(f Files, o Options) (*identity, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, fmt.Errorf("%w: want a certificate, a key and a CA bundle", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		// The error names files and formats, never key material.
		return nil, fmt.Errorf("%w: %s and %s: %w", ErrConfig, f.Cert, f.Key, err)
	}
	if fi, err := os.Stat(f.Key); err == nil && fi.Mode().Perm()&0o077 != 0 {
		o.Log.Warn().Str("key", f.Key).Str("mode", fi.Mode().Perm().String()).
			Msg("the TLS private key is readable by others than its owner; chmod 0600 it")
	}
	bundle, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, f.CA)
	}
	id, err := newIdentity(cert, roots, o)
	if err != nil {
		return nil, err
	}
	id.bundle = bundle
	return id, nil
}

// New returns a Transport presenting cert and trusting roots; see Load.
func New(cert tls.Certificate, roots *x509.CertPool, o Options) (*Transport, error) {
	o = o.withDefaults()
	id, err := newIdentity(cert, roots, o)
	if err != nil {
		return nil, err
	}
	t := &Transport{opts: o}
	t.cur.Store(id)
	return t, nil
}

// newIdentity checks cert against roots (New's checks) and builds the two
// TLS configurations.
func newIdentity(cert tls.Certificate, roots *x509.CertPool, o Options) (*identity, error) {
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if leaf == nil {
		return nil, fmt.Errorf("%w: no certificate", ErrConfig)
	}
	now := time.Now()
	if o.Time != nil {
		now = o.Time()
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			return nil, fmt.Errorf("%w: this host's certificate (%s) against the CA bundle, %s: %w", ErrConfig, leaf.Subject, usageName(use), err)
		}
	}
	own := &cert
	base := tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		Time:       o.Time,
	}
	server := base.Clone()
	server.Certificates = []tls.Certificate{cert}
	server.ClientAuth = tls.RequireAndVerifyClientCert
	server.ClientCAs = roots
	server.SessionTicketsDisabled = true
	client := base.Clone()
	client.RootCAs = roots
	// Always present the certificate (tls would leave it out when its
	// issuer is not among the CAs the server names, and the server would
	// only say that none came).
	client.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return own, nil }
	return &identity{server: server, client: client, leaf: leaf}, nil
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "as a server (serverAuth)"
	}
	return "as a client (clientAuth)"
}

// Dial connects to addr (host:port) and completes the handshake: the
// server's certificate chains to the CA bundle and names addr's host. A
// server that refuses this host's certificate is seen at the first read
// (in TLS 1.3 the client's handshake ends before the server has judged its
// certificate): the read fails with the server's alert.
func (t *Transport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mtls: connecting to %s: %w", addr, err)
	}
	cfg := t.cur.Load().client
	if host, _, err := net.SplitHostPort(addr); err == nil {
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		tc.Close()
		logRefused(t.opts.Log.Warn(), err).Str("peer", addr).Str("role", "client").Msg("migration peer refused")
		return nil, fmt.Errorf("mtls: TLS handshake with %s: %w", addr, err)
	}
	logPeer(t.opts.Log.Info(), tc).Str("role", "client").Msg("migration peer authenticated")
	return tc, nil
}

// Listen listens on addr (host:port; port 0 picks one). Accept returns
// only connections whose handshake completed: the peer's certificate
// chains to the CA bundle and allows client authentication.
func (t *Transport) Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mtls: listening on %s: %w", addr, err)
	}
	// Each handshake takes the identity current when the peer's hello
	// arrives, so a Reload reaches a listener that is already open.
	cfg := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return t.cur.Load().server, nil
	}}
	return newListener(l, cfg, t.opts), nil
}
