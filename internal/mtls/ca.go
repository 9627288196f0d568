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
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

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
