package mtls

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// File names in a certificate directory (gmigd certs -out DIR).
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca.key"
	lockFile   = ".lock"
)

// DefaultValidity is how long EnsureCA's and WriteHost's certificates are
// valid by default.
const DefaultValidity = 365 * 24 * time.Hour

// backdate moves NotBefore an hour into the past, so a peer whose clock is
// a little behind accepts a certificate made a moment ago.
const backdate = time.Hour

// LocalSANs are in every host certificate made here: the cluster harness
// and the tests reach daemons on loopback.
var LocalSANs = []string{"127.0.0.1", "::1", "localhost"}

// ErrHost is an unusable host specification.
var ErrHost = errors.New("mtls: bad host")

// Host names one host certificate: Name is its subject's common name and
// its files' base name (NAME.pem, NAME.key); SANs are the names and
// addresses peers reach it at (Name itself and LocalSANs are added).
type Host struct {
	Name string
	SANs []string
}

// hostNameRE is what a host's Name may be: it becomes a file name.
var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ParseHosts reads a comma-separated list of hosts, each NAME or
// NAME=SAN+SAN... (a SAN is a DNS name or an IP address): "a,b" or
// "a=10.0.0.11,b=10.0.0.12+b.example".
func ParseHosts(s string) ([]Host, error) {
	var hosts []Host
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, sans, withSANs := strings.Cut(f, "=")
		h := Host{Name: name}
		if withSANs {
			h.SANs = strings.Split(sans, "+")
		}
		if err := h.check(); err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: no host in %q", ErrHost, s)
	}
	return hosts, nil
}

func (h Host) check() error {
	if !hostNameRE.MatchString(h.Name) {
		return fmt.Errorf("%w: name %q (want 1-63 of A-Z a-z 0-9 . _ -)", ErrHost, h.Name)
	}
	for _, s := range h.SANs {
		if s == "" || strings.ContainsAny(s, " /\\,=+") {
			return fmt.Errorf("%w: %s's name %q", ErrHost, h.Name, s)
		}
	}
	return nil
}

// names returns h's DNS names and IP addresses: Name, SANs, LocalSANs.
func (h Host) names() (dns []string, ips []net.IP) {
	for _, s := range slices.Concat([]string{h.Name}, h.SANs, LocalSANs) {
		if ip := net.ParseIP(s); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dns, s) {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

// Files names the three PEM files one gmigd needs: its certificate, its
// private key and the CA bundle its peers' certificates must chain to.
type Files struct {
	Cert, Key, CA string
}

// HostFiles returns the files of host name in directory dir.
func HostFiles(dir, name string) Files {
	return Files{
		Cert: filepath.Join(dir, name+".pem"),
		Key:  filepath.Join(dir, name+".key"),
		CA:   filepath.Join(dir, CACertFile),
	}
}

// CA is a certificate authority that signs host certificates (for tests
// and demos).
type CA struct {
	Cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// NewCA makes a CA with a new ECDSA P-256 key, valid for validFor.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mtls: generating the CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"gmig (testing only)"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("mtls: signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	return &CA{Cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadCA reads a CA's certificate and key (PEM).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("mtls: %s: no certificate", certFile)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mtls: %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("mtls: %s is not a CA certificate", certFile)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("mtls: %s: no PEM key", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mtls: %s: %w", keyFile, err) // never the key's bytes
	}
	key, ok := k.(crypto.Signer)
	if !ok || !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("mtls: %s does not hold the key of %s", keyFile, certFile)
	}
	return &CA{Cert: cert, key: key, certPEM: certPEM}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// CertPEM is the CA's certificate, the bundle peers verify against.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Write saves the CA in dir: ca.pem (0644) and ca.key (0600).
func (ca *CA) Write(dir string) error {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	if err := writeFile(filepath.Join(dir, CAKeyFile), pemBlock("PRIVATE KEY", der), 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CACertFile), ca.certPEM, 0o644)
}

// leafOptions shape a host certificate; tests make bad ones with them.
type leafOptions struct {
	notBefore, notAfter time.Time
	usage               []x509.ExtKeyUsage
}

// Issue makes a host certificate for h, valid for validFor, with a new
// ECDSA P-256 key, usable both to serve and to dial migrations; it returns
// both as PEM.
func (ca *CA) Issue(h Host, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	now := time.Now()
	return ca.issue(h, leafOptions{
		notBefore: now.Add(-backdate), notAfter: now.Add(validFor),
		usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(h Host, o leafOptions) (certPEM, keyPEM []byte, err error) {
	if err := h.check(); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: generating %s's key: %w", h.Name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	dns, ips := h.names()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: h.Name, Organization: []string{"gmig (testing only)"}},
		NotBefore:             o.notBefore,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           o.usage,
		BasicConstraintsValid: true,
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	// A certificate outliving its CA would fail verification anyway.
	tmpl.NotAfter = o.notAfter
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: signing %s's certificate: %w", h.Name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

// WriteHost issues a certificate for h and writes it in dir with its key
// and the CA's certificate: NAME.pem (0644), NAME.key (0600), ca.pem.
func (ca *CA) WriteHost(dir string, h Host, validFor time.Duration) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(h, validFor)
	if err != nil {
		return Files{}, err
	}
	f := HostFiles(dir, h.Name)
	if err := writeFile(f.Key, keyPEM, 0o600); err != nil {
		return Files{}, err
	}
	if err := writeFile(f.Cert, certPEM, 0o644); err != nil {
		return Files{}, err
	}
	if err := ca.writeCert(f.CA); err != nil {
		return Files{}, err
	}
	return f, nil
}

// writeCert writes the CA's certificate at path unless it is there already.
func (ca *CA) writeCert(path string) error {
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, ca.certPEM) {
		return nil
	}
	return writeFile(path, ca.certPEM, 0o644)
}

// EnsureCA loads the CA in dir (ca.pem, ca.key), or makes one valid for
// validFor and writes it there if dir has none. dir is made 0700 if need be.
func EnsureCA(dir string, validFor time.Duration) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	switch {
	case cerr == nil && kerr == nil:
		return LoadCA(certFile, keyFile)
	case errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("mtls: %s has one of %s and %s but not both", dir, CACertFile, CAKeyFile)
	}
	ca, err := NewCA("gmig test CA", validFor)
	if err != nil {
		return nil, err
	}
	return ca, ca.Write(dir)
}

// Ensure returns host h's files in dir, making what is missing: the CA
// (once per directory) and h's certificate and key (again when the ones
// there are unreadable, not from this CA, lack one of h's names, or expire
// within a day). Callers in several processes may share dir: a lock file
// there serializes them. This is the cluster harness's: each daemon of a
// cluster gets a certificate from the cluster's one CA.
func Ensure(dir string, h Host) (Files, error) {
	if err := h.check(); err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("mtls: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return Files{}, err
	}
	defer unlock()
	ca, err := EnsureCA(dir, DefaultValidity)
	if err != nil {
		return Files{}, err
	}
	f := HostFiles(dir, h.Name)
	if hostUsable(ca, f, h) {
		return f, nil
	}
	return ca.WriteHost(dir, h, DefaultValidity)
}

// hostUsable reports whether the host certificate in f is from ca, names
// all of h's names and stays valid for at least a day.
func hostUsable(ca *CA, f Files, h Host) bool {
	if _, err := os.Stat(f.Key); err != nil {
		return false
	}
	cert, err := readCert(f.Cert)
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil || time.Until(cert.NotAfter) < 24*time.Hour {
		return false
	}
	dns, ips := h.names()
	for _, d := range dns {
		if !slices.Contains(cert.DNSNames, d) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, _ := pem.Decode(b)
	if p == nil || p.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("mtls: %s: no certificate", path)
	}
	return x509.ParseCertificate(p.Bytes)
}

// lockDir takes an exclusive lock on dir's lock file until unlock.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("mtls: locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// writeFile writes data at path with exactly mode (whatever the umask),
// through a temporary file renamed into place, so a reader never sees half
// a file and a key is never readable by others, even for a moment.
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename: nothing there
	// CreateTemp makes the file 0600; Chmod sets the final mode exactly.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("mtls: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	return nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("mtls: serial number: %w", err)
	}
	return n, nil
}
